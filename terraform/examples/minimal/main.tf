# The bucket and the four policies, nothing else.

terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
  }
}

variable "bucket_name" {
  description = "Name of the s3log bucket."
  type        = string
}

variable "prefix" {
  description = "Key prefix for sessions."
  type        = string
  default     = "s3log"
}

module "s3log" {
  source      = "../../modules/s3log-bucket"
  bucket_name = var.bucket_name
  prefix      = var.prefix
  tags        = { app = "s3log" }
}

output "bucket_name" {
  description = "The bucket's name."
  value       = module.s3log.bucket_name
}

output "bucket_region" {
  description = "The region the bucket lives in."
  value       = module.s3log.bucket_region
}

output "writer_policy_arn" {
  description = "Attach to agent workers."
  value       = module.s3log.writer_policy_arn
}

output "reader_policy_arn" {
  description = "Attach to analytics jobs."
  value       = module.s3log.reader_policy_arn
}

output "gc_policy_arn" {
  description = "Attach to the gc job."
  value       = module.s3log.gc_policy_arn
}

output "sweep_policy_arn" {
  description = "Attach to the retention sweep (s3log expire, then gc)."
  value       = module.s3log.sweep_policy_arn
}
