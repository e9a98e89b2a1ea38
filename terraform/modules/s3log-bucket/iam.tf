# Least-privilege policies for the four roles s3log's code has. Each statement grants
# exactly S3 calls s3log's store makes for that role, on the keys it makes them on
# (tests/test_terraform.py records the calls of each role's workflows and fails if a
# policy allows one less, or grants an action or a key pattern nothing uses). Keys:
#
#   PREFIX/sessions/{sid}/head, .../seg/*, .../forks/*   sessions (and sessions/_probe/*)
#   PREFIX/activity/{YYYY-MM-DD}/{sid}                    the activity index
#
# gc (and rm) only list, read heads and delete: no PUT, so a leaked gc credential cannot
# rewrite anything. Nor can the sweep's (expire + gc): expire deletes an idle session's
# head with If-Match on the ETag just read, and writes nothing. IAM cannot constrain a
# PUT's body, so a role allowed to PUT a head could forge any history; the sweep has no
# PUT at all (docs/decisions/0036).
#
# S3 authorizes a DELETE with If-Match on an ETag as s3:DeleteObject *and* s3:GetObject
# on the object ("Enforce conditional deletes" in the S3 user guide): every key a role
# deletes with If-Match (heads, fork markers) is one it may GET. And a GET (or a
# conditional request) of a missing key answers 404 only to a caller whose s3:ListBucket
# admits the key as s3:prefix, else 403: each role's ListPrefix covers every key it reads.

locals {
  sessions_arn = "${local.bucket_arn}/${var.prefix}/sessions/*"
  heads_arn    = "${local.bucket_arn}/${var.prefix}/sessions/*/head"
  # What gc deletes under a session besides its head: segments and fork markers.
  segments_arn = "${local.bucket_arn}/${var.prefix}/sessions/*/seg/*"
  # Fork markers: deleted with If-Match (gc, rm, the sweep's gc), which needs GetObject too.
  forks_arn    = "${local.bucket_arn}/${var.prefix}/sessions/*/forks/*"
  activity_arn = "${local.bucket_arn}/${var.prefix}/activity/*"
  # s3:prefix values of the LISTs: session folders, and the activity index's day folders.
  list_sessions = "${var.prefix}/sessions/*"
  list_activity = "${var.prefix}/activity/*"
  # Reading SSE-KMS objects needs Decrypt; writing them needs GenerateDataKey too.
  kms_read  = ["kms:Decrypt"]
  kms_write = ["kms:Decrypt", "kms:GenerateDataKey"]
  # An IAM policy's description cannot change in place (AWS replaces the policy, and
  # its ARN): keep these as they were when the policies were first created.
  role_descriptions = {
    reader = "Read s3log sessions under ${var.prefix}/ in ${var.bucket_name}."
    writer = "Append to s3log sessions under ${var.prefix}/ in ${var.bucket_name} (no delete)."
    gc     = "Garbage-collect and delete s3log sessions under ${var.prefix}/ in ${var.bucket_name} (no write)."
    sweep  = "Expire idle s3log sessions (If-Match deletes of heads, no write) and garbage-collect under ${var.prefix}/ in ${var.bucket_name}."
  }
  role_policies = {
    reader = data.aws_iam_policy_document.reader.json
    writer = data.aws_iam_policy_document.writer.json
    gc     = data.aws_iam_policy_document.gc.json
    sweep  = data.aws_iam_policy_document.sweep.json
  }
}

# Readers: heads and segments; LIST session folders and, for "active since" windows
# (Log.active_sessions, analytics scan(since=...)), the activity index.
data "aws_iam_policy_document" "reader" {
  statement {
    sid       = "ReadSessions"
    actions   = ["s3:GetObject"]
    resources = [local.sessions_arn]
  }
  statement {
    sid       = "ListPrefix"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [local.list_sessions, local.list_activity]
    }
  }
  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [1]
    content {
      sid       = "UseKey"
      actions   = local.kms_read
      resources = [var.kms_key_arn]
    }
  }
}

# Writers: everything a reader does, plus PUTs of heads, segments, fork markers, the
# precondition probe's keys (sessions/_probe/*) and activity markers. The bucket policy
# makes each of those PUTs conditional; a marker that already exists is confirmed by
# one GET. No delete.
data "aws_iam_policy_document" "writer" {
  statement {
    sid       = "ReadWriteSessions"
    actions   = ["s3:GetObject", "s3:PutObject"]
    resources = [local.sessions_arn]
  }
  statement {
    sid       = "WriteActivityMarkers"
    actions   = ["s3:GetObject", "s3:PutObject"]
    resources = [local.activity_arn]
  }
  statement {
    sid       = "ListPrefix"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [local.list_sessions, local.list_activity]
    }
  }
  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [1]
    content {
      sid       = "UseKey"
      actions   = local.kms_write
      resources = [var.kms_key_arn]
    }
  }
}

# gc and rm: read heads (never segments), list session folders, delete a session's
# objects and its activity markers.
data "aws_iam_policy_document" "gc" {
  statement {
    sid       = "ReadHeads"
    actions   = ["s3:GetObject"]
    resources = [local.heads_arn]
  }
  # gc deletes a dangling fork marker, and rm its children's markers and its own, only
  # with If-Match on the ETag listed: S3 refuses that DELETE without GetObject on the
  # marker (a marker names a parent, a child and a fork point: no entry of a session).
  statement {
    sid       = "ReadForkMarkers"
    actions   = ["s3:GetObject"]
    resources = [local.forks_arn]
  }
  statement {
    sid       = "DeleteSessionsAndMarkers"
    actions   = ["s3:DeleteObject"]
    resources = [local.sessions_arn, local.activity_arn]
  }
  statement {
    sid       = "ListPrefix"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [local.list_sessions]
    }
  }
  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [1]
    content {
      sid       = "UseKey"
      actions   = local.kms_read
      resources = [var.kms_key_arn]
    }
  }
}

# The retention sweep (Log.expire, then gc; scripts/sweep_lambda.py, `s3log expire`):
# what gc does, except deleting a head by key, plus the activity index (read for the
# idle window, its old day folders deleted). No PUT: it deletes, never writes.
data "aws_iam_policy_document" "sweep" {
  statement {
    sid       = "ReadHeads"
    actions   = ["s3:GetObject"]
    resources = [local.heads_arn]
  }
  # gc deletes a dangling fork marker only with If-Match on the ETag listed, which S3
  # authorizes only with GetObject on the marker too.
  statement {
    sid       = "ReadForkMarkers"
    actions   = ["s3:GetObject"]
    resources = [local.forks_arn]
  }
  statement {
    sid       = "DeleteGarbageAndMarkers"
    actions   = ["s3:DeleteObject"]
    resources = [local.segments_arn, local.forks_arn, local.activity_arn]
  }
  # expire deletes an idle head, and gc a tombstone past its grace, only if it is still
  # the head read: a session committed to (or created again at the id) meanwhile is kept (412).
  statement {
    sid       = "DeleteHeadsIfMatch"
    actions   = ["s3:DeleteObject"]
    resources = [local.heads_arn]
    condition {
      test     = "Null"
      variable = "s3:if-match"
      values   = ["false"]
    }
  }
  statement {
    sid       = "ListPrefix"
    actions   = ["s3:ListBucket"]
    resources = [local.bucket_arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = [local.list_sessions, local.list_activity]
    }
  }
  dynamic "statement" {
    for_each = var.kms_key_arn == null ? [] : [1]
    content {
      sid       = "UseKey"
      actions   = local.kms_read
      resources = [var.kms_key_arn]
    }
  }
}

resource "aws_iam_policy" "role" {
  for_each    = local.role_descriptions
  name_prefix = "s3log-${each.key}-"
  description = each.value
  policy      = local.role_policies[each.key]
  tags        = var.tags
}
