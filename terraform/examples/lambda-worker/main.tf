# An example serverless agent worker (scripts/agent_worker.py) on Lambda, with the
# writer policy only. Build the deployment package first:
#   pip install --target build/ . && cp scripts/agent_worker.py build/ && (cd build && zip -r ../worker.zip .)

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
  description = "Name of the s3log bucket to create."
  type        = string
}

variable "prefix" {
  description = "Key prefix for sessions."
  type        = string
  default     = "s3log"
}

variable "function_name" {
  description = "Name of the Lambda function."
  type        = string
  default     = "s3log-agent-worker"
  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,64}$", var.function_name))
    error_message = "function_name must be 1-64 letters, digits, '_' or '-'."
  }
}

variable "package_zip" {
  description = "Path of the deployment package (s3log and scripts/agent_worker.py)."
  type        = string
  default     = "worker.zip"
}

variable "log_retention_days" {
  description = "How long the worker's logs are kept."
  type        = number
  default     = 365
}

variable "reserved_concurrency" {
  description = "Upper bound on concurrent invocations."
  type        = number
  default     = 50
}

variable "kms_key_arn" {
  description = "KMS key for the bucket, the logs and the function's environment; null uses AWS-managed keys."
  type        = string
  default     = null
}

module "s3log" {
  source      = "../../modules/s3log-bucket"
  bucket_name = var.bucket_name
  prefix      = var.prefix
  kms_key_arn = var.kms_key_arn
  tags        = { app = "s3log", component = "agent-worker" }
}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["lambda.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "worker" {
  name_prefix        = "s3log-worker-"
  assume_role_policy = data.aws_iam_policy_document.assume.json
}

resource "aws_iam_role_policy_attachment" "writer" {
  role       = aws_iam_role.worker.name
  policy_arn = module.s3log.writer_policy_arn
}

resource "aws_iam_role_policy_attachment" "logs" {
  role       = aws_iam_role.worker.name
  policy_arn = "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole"
}

resource "aws_cloudwatch_log_group" "worker" {
  #checkov:skip=CKV_AWS_158:Encrypted with var.kms_key_arn when given; CloudWatch's own encryption otherwise.
  name              = "/aws/lambda/${var.function_name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn
}

resource "aws_lambda_function" "worker" {
  #checkov:skip=CKV_AWS_117:The worker only calls S3; a VPC adds NAT or endpoint costs the example does not need.
  #checkov:skip=CKV_AWS_116:Invoked synchronously by the caller, which sees errors; a DLQ applies to async invocations.
  #checkov:skip=CKV_AWS_272:Code signing needs a signing profile the operator owns.
  #checkov:skip=CKV_AWS_173:The environment holds only the bucket name and prefix, no secrets.
  function_name                  = var.function_name
  role                           = aws_iam_role.worker.arn
  runtime                        = "python3.11"
  handler                        = "agent_worker.handler"
  filename                       = var.package_zip
  source_code_hash               = fileexists(var.package_zip) ? filebase64sha256(var.package_zip) : null
  timeout                        = 60
  memory_size                    = 512
  reserved_concurrent_executions = var.reserved_concurrency
  kms_key_arn                    = var.kms_key_arn

  tracing_config {
    mode = "Active"
  }

  environment {
    variables = {
      S3LOG_BUCKET = module.s3log.bucket_name
      S3LOG_PREFIX = module.s3log.prefix
    }
  }

  depends_on = [aws_cloudwatch_log_group.worker, aws_iam_role_policy_attachment.logs]
}

output "function_name" {
  description = "The worker function."
  value       = aws_lambda_function.worker.function_name
}

output "bucket_name" {
  description = "The s3log bucket."
  value       = module.s3log.bucket_name
}
