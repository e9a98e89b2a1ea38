# Least-privilege policies for the three roles s3log's code has. The object actions
# are exactly the S3 calls s3log's store makes for each role (tests/test_terraform.py
# derives them from s3log/store/s3.py and fails if these drift); every role may also
# list, but only under the prefix. gc (and rm) only list, read heads and delete: no PUT,
# so a leaked gc credential cannot rewrite anything.

locals {
  objects_arn = "${local.bucket_arn}/${var.prefix}/*"
  list_prefix = "${var.prefix}/*"
  kms_actions = ["kms:Decrypt", "kms:GenerateDataKey"]
  role_object_actions = {
    reader = ["s3:GetObject"]
    writer = ["s3:GetObject", "s3:PutObject"]
    gc     = ["s3:GetObject", "s3:DeleteObject"]
  }
  role_descriptions = {
    reader = "Read s3log sessions under ${var.prefix}/ in ${var.bucket_name}."
    writer = "Append to s3log sessions under ${var.prefix}/ in ${var.bucket_name} (no delete)."
    gc     = "Garbage-collect and delete s3log sessions under ${var.prefix}/ in ${var.bucket_name} (no write)."
  }
}

data "aws_iam_policy_document" "role" {
  for_each = local.role_object_actions

  statement {
    sid       = "Objects"
    actions   = each.value
    resources = [local.objects_arn]
  }
  statement {
    sid       = "ListPrefix"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
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

resource "aws_iam_policy" "role" {
  for_each    = local.role_object_actions
  name_prefix = "s3log-${each.key}-"
  description = local.role_descriptions[each.key]
  policy      = data.aws_iam_policy_document.role[each.key].json
  tags        = var.tags
}
