output "bucket_name" {
  description = "The bucket's name."
  value       = aws_s3_bucket.this.id
}

output "bucket_arn" {
  description = "The bucket's ARN."
  value       = aws_s3_bucket.this.arn
}

output "prefix" {
  description = "The key prefix s3log uses."
  value       = var.prefix
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
  description = "Policy for gc and rm (adds delete)."
  value       = aws_iam_policy.role["gc"].arn
}
