variable "bucket_name" {
  description = "Name of the bucket holding the sessions."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", var.bucket_name))
    error_message = "bucket_name must be a valid S3 bucket name (3-63 lowercase letters, digits, dots, hyphens)."
  }
}

variable "prefix" {
  description = "Key prefix s3log writes under (no leading or trailing slash)."
  type        = string
  default     = "s3log"
  validation {
    condition     = can(regex("^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$", var.prefix))
    error_message = "prefix must be path segments of letters, digits, '.', '_' or '-', separated by '/', with no leading or trailing slash."
  }
}

variable "create_bucket" {
  description = "Create and configure the bucket. false: the bucket named bucket_name exists already; only the IAM policies are made (merge output bucket_policy_json into its policy yourself)."
  type        = bool
  default     = true
}

variable "kms_key_arn" {
  description = "KMS key for SSE-KMS; null uses SSE-S3."
  type        = string
  default     = null
}

variable "versioning" {
  description = "Enable bucket versioning. Not needed by s3log (heads are replaced only conditionally); costs one noncurrent version per commit. Object Lock turns it on regardless."
  type        = bool
  default     = false
}

variable "noncurrent_version_expiration_days" {
  description = "With versioning on, expire noncurrent versions after this many days."
  type        = number
  default     = 7
  validation {
    condition     = var.noncurrent_version_expiration_days >= 1
    error_message = "noncurrent_version_expiration_days must be at least 1."
  }
}

variable "abort_incomplete_multipart_days" {
  description = "Abort incomplete multipart uploads after this many days."
  type        = number
  default     = 1
  validation {
    condition     = var.abort_incomplete_multipart_days >= 1
    error_message = "abort_incomplete_multipart_days must be at least 1."
  }
}

variable "enforce_conditional_head_writes" {
  description = "Deny PutObject on */head keys unless it carries If-Match or If-None-Match, so no writer can blindly overwrite a head."
  type        = bool
  default     = true
}

variable "enforce_create_only_history" {
  description = "Deny PutObject on segments (sessions/*/seg/*) and fork markers (sessions/*/forks/*) unless it carries If-None-Match, so no writer can overwrite history."
  type        = bool
  default     = true
}

variable "object_lock_enabled" {
  description = "Enable S3 Object Lock with a default retention on every new object version (turns versioning on). Deleted objects stay as locked noncurrent versions until the retention ends."
  type        = bool
  default     = false
}

variable "object_lock_mode" {
  description = "Object Lock retention mode: GOVERNANCE (principals with s3:BypassGovernanceRetention may delete early) or COMPLIANCE (nobody may, not even the root user)."
  type        = string
  default     = "GOVERNANCE"
  validation {
    condition     = contains(["GOVERNANCE", "COMPLIANCE"], var.object_lock_mode)
    error_message = "object_lock_mode must be GOVERNANCE or COMPLIANCE."
  }
}

variable "object_lock_retention_days" {
  description = "Object Lock default retention in days."
  type        = number
  default     = 30
  validation {
    condition     = var.object_lock_retention_days >= 1 && floor(var.object_lock_retention_days) == var.object_lock_retention_days
    error_message = "object_lock_retention_days must be a whole number of days, at least 1."
  }
}

variable "force_destroy" {
  description = "Allow terraform destroy to delete a non-empty bucket."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
