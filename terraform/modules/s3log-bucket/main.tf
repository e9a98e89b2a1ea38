# A bucket for s3log: private, encrypted, TLS only, heads written only conditionally,
# segments, fork markers and activity markers create-only. With create_bucket = false
# the module touches no bucket setting: it reads the existing bucket and builds the
# policies for it.

locals {
  create_count = var.create_bucket ? 1 : 0
  # Object Lock needs versioning; otherwise versioning is only what was asked for.
  versioning = var.versioning || var.object_lock_enabled
  bucket_id  = var.create_bucket ? aws_s3_bucket.this[0].id : data.aws_s3_bucket.existing[0].id
  bucket_arn = var.create_bucket ? aws_s3_bucket.this[0].arn : data.aws_s3_bucket.existing[0].arn
  # Both expose the region the bucket lives in (not necessarily the provider's).
  bucket_region = var.create_bucket ? aws_s3_bucket.this[0].region : data.aws_s3_bucket.existing[0].region
}

data "aws_s3_bucket" "existing" {
  count  = var.create_bucket ? 0 : 1
  bucket = var.bucket_name

  lifecycle {
    precondition {
      condition     = !var.versioning && !var.object_lock_enabled
      error_message = "versioning and object_lock_enabled configure a bucket this module creates; with create_bucket = false set them on your bucket yourself."
    }
  }
}

resource "aws_s3_bucket" "this" {
  #checkov:skip=CKV_AWS_18:Access logging needs a second, log-receiving bucket; the caller decides where logs go.
  #checkov:skip=CKV_AWS_144:Cross-region replication is a deployment choice; s3log needs none.
  #checkov:skip=CKV2_AWS_62:s3log reads heads directly; it needs no event notifications.
  #checkov:skip=CKV_AWS_21:Versioning is optional (var.versioning): heads are replaced only by conditional PUT, so overwrite protection does not depend on it.
  #checkov:skip=CKV_AWS_145:SSE-KMS is used when var.kms_key_arn is set; SSE-S3 otherwise, by the operator's choice.
  count         = local.create_count
  bucket        = var.bucket_name
  force_destroy = var.force_destroy
  tags          = var.tags
}

resource "aws_s3_bucket_public_access_block" "this" {
  count                   = local.create_count
  bucket                  = aws_s3_bucket.this[0].id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "this" {
  count  = local.create_count
  bucket = aws_s3_bucket.this[0].id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "this" {
  count  = local.create_count
  bucket = aws_s3_bucket.this[0].id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = var.kms_key_arn == null ? "AES256" : "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    bucket_key_enabled = var.kms_key_arn != null
  }
}

# Only when versioning is asked for (or Object Lock needs it): a "Suspended" resource on
# a bucket that never had versioning would be a needless API call and state entry.
resource "aws_s3_bucket_versioning" "this" {
  count  = var.create_bucket && local.versioning ? 1 : 0
  bucket = aws_s3_bucket.this[0].id
  versioning_configuration {
    status = "Enabled"
  }
}

# Default retention applies to every new object version in the bucket (S3 has no
# per-prefix default): see terraform/README.md for what that means for heads and gc.
# Enabling it here (not on aws_s3_bucket) works on a bucket that already exists and
# does not force the bucket to be replaced.
resource "aws_s3_bucket_object_lock_configuration" "this" {
  count  = var.create_bucket && var.object_lock_enabled ? 1 : 0
  bucket = aws_s3_bucket.this[0].id
  rule {
    default_retention {
      mode = var.object_lock_mode
      days = var.object_lock_retention_days
    }
  }
  depends_on = [aws_s3_bucket_versioning.this]
}

resource "aws_s3_bucket_lifecycle_configuration" "this" {
  count  = local.create_count
  bucket = aws_s3_bucket.this[0].id

  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_multipart_days
    }
  }

  # Each precondition probe (once per process and bucket) leaves one object of about 30
  # bytes under _probe/race/: its race key, which its stale If-Match DELETE must not
  # delete (docs/decisions/0034); two where a conditional DELETE is not possible.
  rule {
    id     = "expire-probe-race-keys"
    status = "Enabled"
    filter {
      prefix = "${var.prefix}/sessions/_probe/race/"
    }
    expiration {
      days = 1
    }
  }

  # A head is rewritten on every commit and gc/rm leave delete markers: with versioning
  # on, old versions and markers pile up. Locked versions go once their retention ends.
  rule {
    id     = "expire-noncurrent-versions"
    status = local.versioning ? "Enabled" : "Disabled"
    filter {}
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_expiration_days
    }
    expiration {
      expired_object_delete_marker = true
    }
  }

  depends_on = [aws_s3_bucket_versioning.this]
}

data "aws_iam_policy_document" "bucket" {
  statement {
    sid     = "DenyInsecureTransport"
    effect  = "Deny"
    actions = ["s3:*"]
    resources = [
      local.bucket_arn,
      "${local.bucket_arn}/*",
    ]
    principals {
      type        = "*"
      identifiers = ["*"]
    }
    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }

  dynamic "statement" {
    for_each = var.enforce_conditional_head_writes ? [1] : []
    content {
      sid     = "DenyUnconditionalHeadWrites"
      effect  = "Deny"
      actions = ["s3:PutObject"]
      # Heads, fork markers and the precondition probe's two keys (sessions/_probe/head,
      # .../missing): s3log writes each with If-Match or If-None-Match, never blindly. A
      # fork marker is replaced (If-Match) when a fork is retried (docs/decisions/0008);
      # readers use only its key, so replacing one changes no history.
      resources = [
        "${local.bucket_arn}/${var.prefix}/sessions/*/head",
        "${local.bucket_arn}/${var.prefix}/sessions/*/forks/*",
        "${local.bucket_arn}/${var.prefix}/sessions/_probe/*",
      ]
      principals {
        type        = "*"
        identifiers = ["*"]
      }
      # Both keys absent: neither If-Match nor If-None-Match was sent.
      condition {
        test     = "Null"
        variable = "s3:if-match"
        values   = ["true"]
      }
      condition {
        test     = "Null"
        variable = "s3:if-none-match"
        values   = ["true"]
      }
    }
  }

  # Segments and activity markers are written once (If-None-Match: *) and never
  # replaced: without this, anyone allowed to write heads could overwrite history in
  # place (or empty the activity index's record of a day). If-Match alone is denied
  # too: it replaces an existing object. (Fork markers are rewritten by a retried fork:
  # the statement above covers them.)
  dynamic "statement" {
    for_each = var.enforce_create_only_history ? [1] : []
    content {
      sid     = "DenyOverwritingHistory"
      effect  = "Deny"
      actions = ["s3:PutObject"]
      resources = [
        "${local.bucket_arn}/${var.prefix}/sessions/*/seg/*",
        "${local.bucket_arn}/${var.prefix}/activity/*",
      ]
      principals {
        type        = "*"
        identifiers = ["*"]
      }
      condition {
        test     = "Null"
        variable = "s3:if-none-match"
        values   = ["true"]
      }
    }
  }
}

resource "aws_s3_bucket_policy" "this" {
  count      = local.create_count
  bucket     = aws_s3_bucket.this[0].id
  policy     = data.aws_iam_policy_document.bucket.json
  depends_on = [aws_s3_bucket_public_access_block.this]
}

# Earlier versions of this module had no count: keep their state, do not recreate.
moved {
  from = aws_s3_bucket.this
  to   = aws_s3_bucket.this[0]
}

moved {
  from = aws_s3_bucket_public_access_block.this
  to   = aws_s3_bucket_public_access_block.this[0]
}

moved {
  from = aws_s3_bucket_ownership_controls.this
  to   = aws_s3_bucket_ownership_controls.this[0]
}

moved {
  from = aws_s3_bucket_server_side_encryption_configuration.this
  to   = aws_s3_bucket_server_side_encryption_configuration.this[0]
}

moved {
  from = aws_s3_bucket_lifecycle_configuration.this
  to   = aws_s3_bucket_lifecycle_configuration.this[0]
}

moved {
  from = aws_s3_bucket_policy.this
  to   = aws_s3_bucket_policy.this[0]
}

moved {
  from = aws_s3_bucket_versioning.this
  to   = aws_s3_bucket_versioning.this[0]
}
