output "bucket_name" {
  description = "The bucket's name."
  value       = local.bucket_id
}

output "bucket_arn" {
  description = "The bucket's ARN."
  value       = local.bucket_arn
}

output "bucket_region" {
  description = "The region the bucket lives in (set S3Store's region_name / AWS_REGION to it)."
  value       = local.bucket_region
}

output "prefix" {
  description = "The key prefix s3log uses."
  value       = var.prefix
}

output "bucket_policy_json" {
  description = "The bucket policy (TLS only, conditional head writes, create-only history). Attached when create_bucket is true; with an existing bucket, merge it into that bucket's policy."
  value       = data.aws_iam_policy_document.bucket.json
}

output "reader_policy_arn" {
  description = "Policy for readers (get + list)."
  value       = aws_iam_policy.role["reader"].arn
}

output "writer_policy_arn" {
  description = "Policy for writers (get, put, list; no delete)."
  value       = aws_iam_policy.role["writer"].arn
}

output "gc_policy_arn" {
  description = "Policy for gc and rm (get, list, delete; no put)."
  value       = aws_iam_policy.role["gc"].arn
}

output "sweep_policy_arn" {
  description = "Policy for the retention sweep, expire then gc (get heads, list, delete; heads only with If-Match; no PUT)."
  value       = aws_iam_policy.role["sweep"].arn
}
