# Least-privilege policies for the three roles s3log's code has. The actions are
# exactly the S3 calls s3log's store makes (tests/test_terraform.py derives them from
# s3log/store/s3.py and fails if these drift).

locals {
  objects_arn = "${aws_s3_bucket.this.arn}/${var.prefix}/*"
  list_prefix = "${var.prefix}/*"
  kms_actions = ["kms:Decrypt", "kms:GenerateDataKey"]
}

data "aws_iam_policy_document" "reader" {
  statement {
    sid       = "ReadObjects"
    actions   = ["s3:GetObject"]
    resources = [local.objects_arn]
  }
  statement {
    sid       = "ListPrefix"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.this.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [local.list_prefix]
    }
  }
  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [1]
    content {
      sid       = "UseKey"
      actions   = local.kms_actions
      resources = [var.kms_key_arn]
    }
  }
}

data "aws_iam_policy_document" "writer" {
  statement {
    sid       = "ReadWriteObjects"
    actions   = ["s3:GetObject", "s3:PutObject"]
    resources = [local.objects_arn]
  }
  statement {
    sid       = "ListPrefix"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.this.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [local.list_prefix]
    }
  }
  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [1]
    content {
      sid       = "UseKey"
      actions   = local.kms_actions
      resources = [var.kms_key_arn]
    }
  }
}

data "aws_iam_policy_document" "gc" {
  statement {
    sid       = "ReadWriteDeleteObjects"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"]
    resources = [local.objects_arn]
  }
  statement {
    sid       = "ListPrefix"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.this.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [local.list_prefix]
    }
  }
  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [1]
    content {
      sid       = "UseKey"
      actions   = local.kms_actions
      resources = [var.kms_key_arn]
    }
  }
}

resource "aws_iam_policy" "reader" {
  name_prefix = "s3log-reader-"
  description = "Read s3log sessions under ${var.prefix}/ in ${var.bucket_name}."
  policy      = data.aws_iam_policy_document.reader.json
  tags        = var.tags
}

resource "aws_iam_policy" "writer" {
  name_prefix = "s3log-writer-"
  description = "Append to s3log sessions under ${var.prefix}/ in ${var.bucket_name} (no delete)."
  policy      = data.aws_iam_policy_document.writer.json
  tags        = var.tags
}

resource "aws_iam_policy" "gc" {
  name_prefix = "s3log-gc-"
  description = "Garbage-collect and delete s3log sessions under ${var.prefix}/ in ${var.bucket_name}."
  policy      = data.aws_iam_policy_document.gc.json
  tags        = var.tags
}
