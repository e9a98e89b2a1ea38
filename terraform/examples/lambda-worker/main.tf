# An example serverless deployment: scripts/agent_worker.py as a Lambda function with
# the writer policy only, and a scheduled retention sweep (scripts/sweep_lambda.py:
# expire idle sessions, then gc) with the module's sweep policy: list, read heads and
# delete (a head only with If-Match); it writes nothing.
#
# `terraform apply` builds the deployment package itself (python3 with pip on the
# machine running Terraform): s3log with its core dependencies only, no extras, as
# wheels for the Lambda runtime's platform, plus the two handler scripts.

terraform {
  required_version = ">= 1.5"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0"
    }
    archive = {
      source  = "hashicorp/archive"
      version = ">= 2.4"
    }
  }
}

variable "bucket_name" {
  description = "Name of the s3log bucket."
  type        = string
}

variable "create_bucket" {
  description = "Create the bucket; false uses an existing bucket named bucket_name (see the module's bucket_policy_json output)."
  type        = bool
  default     = true
}

variable "prefix" {
  description = "Key prefix for sessions."
  type        = string
  default     = "s3log"
}

variable "function_name" {
  description = "Name of the worker Lambda function."
  type        = string
  default     = "s3log-agent-worker"
  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,64}$", var.function_name))
    error_message = "function_name must be 1-64 letters, digits, '_' or '-'."
  }
}

variable "sweep_function_name" {
  description = "Name of the retention-sweep Lambda function."
  type        = string
  default     = "s3log-retention-sweep"
  validation {
    condition     = can(regex("^[A-Za-z0-9_-]{1,64}$", var.sweep_function_name))
    error_message = "sweep_function_name must be 1-64 letters, digits, '_' or '-'."
  }
}

variable "runtime" {
  description = "Lambda Python runtime; the package's wheels are fetched for this version."
  type        = string
  default     = "python3.12"
  # python3.11 runs on Amazon Linux 2 (glibc 2.26): cbor2's wheels need glibc 2.28.
  validation {
    condition     = can(regex("^python3\\.1[2-9]$", var.runtime))
    error_message = "runtime must be python3.12 or later (an Amazon Linux 2023 runtime: s3log's cbor2 wheels need glibc >= 2.28)."
  }
}

variable "architecture" {
  description = "Lambda architecture; the package's wheels are fetched for it."
  type        = string
  default     = "x86_64"
  validation {
    condition     = contains(["x86_64", "arm64"], var.architecture)
    error_message = "architecture must be x86_64 or arm64."
  }
}

variable "python" {
  description = "Python interpreter (with pip) on the machine running Terraform, used to build the package."
  type        = string
  default     = "python3"
}

variable "log_retention_days" {
  description = "How long the functions' logs are kept."
  type        = number
  default     = 365
}

variable "reserved_concurrency" {
  description = "Reserved concurrency of the worker; null (the default) reserves none and uses the account's unreserved pool."
  type        = number
  default     = null
}

variable "kms_key_arn" {
  description = "KMS key for the bucket, the logs and the functions' environment; null uses AWS-managed keys. Its key policy must let CloudWatch Logs use it (terraform/README.md)."
  type        = string
  default     = null
}

variable "sweep_schedule" {
  description = "EventBridge schedule expression of the retention sweep."
  type        = string
  default     = "rate(1 day)"
  validation {
    condition     = can(regex("^(rate|cron)\\(.+\\)$", var.sweep_schedule))
    error_message = "sweep_schedule must be an EventBridge rate(...) or cron(...) expression."
  }
}

variable "idle_days" {
  description = "The sweep expires sessions with no commit for this many days (their head is deleted with If-Match; gc deletes the rest)."
  type        = number
  default     = 30
  validation {
    condition     = var.idle_days >= 1 && floor(var.idle_days) == var.idle_days
    error_message = "idle_days must be a whole number of days, at least 1."
  }
}

variable "gc_older_than_minutes" {
  description = "gc grace period: unreferenced objects younger than this are kept. Must exceed the longest worker invocation."
  type        = number
  default     = 60
  validation {
    condition     = var.gc_older_than_minutes >= 15
    error_message = "gc_older_than_minutes must be at least 15: a commit in flight may still reference a young segment."
  }
}

variable "sweep_dry_run" {
  description = "Report what the sweep would delete without deleting anything."
  type        = bool
  default     = false
}

module "s3log" {
  source        = "../../modules/s3log-bucket"
  bucket_name   = var.bucket_name
  create_bucket = var.create_bucket
  prefix        = var.prefix
  kms_key_arn   = var.kms_key_arn
  tags          = { app = "s3log", component = "agent-worker" }
}

data "aws_partition" "current" {}

# ------------------------------------------------------------------ deployment package

locals {
  repo_root   = abspath("${path.module}/../../..")
  build_dir   = "${path.module}/build/package"
  package_zip = "${path.module}/build/lambda.zip"
  handlers    = ["agent_worker.py", "sweep_lambda.py"]
  # Rebuild when s3log's code, its dependency list or a handler changes.
  package_inputs = sha256(join(",", concat(
    [filesha256("${local.repo_root}/pyproject.toml")],
    [for f in sort(fileset(local.repo_root, "s3log/**/*.py")) : filesha256("${local.repo_root}/${f}")],
    [for h in local.handlers : filesha256("${local.repo_root}/scripts/${h}")],
  )))
  wheel_arch = var.architecture == "arm64" ? "aarch64" : "x86_64"
  # pip does not widen a perennial manylinux tag to older ones: name each glibc level
  # Amazon Linux 2023 (glibc 2.34) can load.
  wheel_platforms = join(" ", [for tag in ["manylinux_2_34", "manylinux_2_28", "manylinux2014"] : "--platform ${tag}_${local.wheel_arch}"])
  wheel_python    = trimprefix(var.runtime, "python")
  iam_managed     = "arn:${data.aws_partition.current.partition}:iam::aws:policy"
}

# s3log is built into a wheel and installed without extras, so only its core
# dependencies come along, as binary wheels for the Lambda platform (never compiled for
# the build machine). boto3 is bundled on purpose: the runtime's copy may predate
# conditional writes (IfNoneMatch / IfMatch).
resource "terraform_data" "package" {
  # The last entry rebuilds a package whose build directory went missing (a fresh
  # checkout or CI runner): archive_file below cannot zip a directory that is not there.
  triggers_replace = [local.package_inputs, var.runtime, var.architecture, fileexists("${local.build_dir}/sweep_lambda.py")]

  provisioner "local-exec" {
    command = <<-EOT
      set -eu
      rm -rf '${local.build_dir}'
      mkdir -p '${local.build_dir}/.wheel'
      ${var.python} -m pip wheel --quiet --no-deps --wheel-dir '${local.build_dir}/.wheel' '${local.repo_root}'
      ${var.python} -m pip install --quiet --no-compile --target '${local.build_dir}' ${local.wheel_platforms} --implementation cp --python-version ${local.wheel_python} --only-binary=:all: '${local.build_dir}'/.wheel/s3log-*.whl
      rm -rf '${local.build_dir}/.wheel'
      cp ${join(" ", [for h in local.handlers : "'${local.repo_root}/scripts/${h}'"])} '${local.build_dir}/'
    EOT
  }
}

data "archive_file" "package" {
  type        = "zip"
  source_dir  = local.build_dir
  output_path = local.package_zip
  depends_on  = [terraform_data.package]
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

# ------------------------------------------------------------------------------ worker

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
  policy_arn = "${local.iam_managed}/service-role/AWSLambdaBasicExecutionRole"
}

# Active tracing needs the role to be allowed to send traces.
resource "aws_iam_role_policy_attachment" "worker_xray" {
  role       = aws_iam_role.worker.name
  policy_arn = "${local.iam_managed}/AWSXRayDaemonWriteAccess"
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
  #checkov:skip=CKV_AWS_115:Reserved concurrency is opt-in (var.reserved_concurrency): reserving carves capacity out of the account's shared pool and fails to deploy on accounts with a small concurrency quota.
  function_name                  = var.function_name
  role                           = aws_iam_role.worker.arn
  runtime                        = var.runtime
  architectures                  = [var.architecture]
  handler                        = "agent_worker.handler"
  filename                       = data.archive_file.package.output_path
  source_code_hash               = data.archive_file.package.output_base64sha256
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

  depends_on = [aws_cloudwatch_log_group.worker, aws_iam_role_policy_attachment.logs, aws_iam_role_policy_attachment.worker_xray]
}

# ------------------------------------------------------------------- retention sweep

# S3 (and the KMS key) through the module's sweep policy: exactly what expire + gc do
# (tests/test_terraform.py checks it against their recorded calls). This inline policy
# adds only the function's own log group.
data "aws_iam_policy_document" "sweep" {
  statement {
    sid       = "OwnLogs"
    actions   = ["logs:CreateLogStream", "logs:PutLogEvents"]
    resources = ["${aws_cloudwatch_log_group.sweep.arn}:*"]
  }
}

resource "aws_iam_role" "sweep" {
  name_prefix        = "s3log-sweep-"
  assume_role_policy = data.aws_iam_policy_document.assume.json
}

resource "aws_iam_role_policy" "sweep" {
  name_prefix = "s3log-sweep-"
  role        = aws_iam_role.sweep.id
  policy      = data.aws_iam_policy_document.sweep.json
}

resource "aws_iam_role_policy_attachment" "sweep_s3" {
  role       = aws_iam_role.sweep.name
  policy_arn = module.s3log.sweep_policy_arn
}

resource "aws_iam_role_policy_attachment" "sweep_xray" {
  role       = aws_iam_role.sweep.name
  policy_arn = "${local.iam_managed}/AWSXRayDaemonWriteAccess"
}

resource "aws_cloudwatch_log_group" "sweep" {
  #checkov:skip=CKV_AWS_158:Encrypted with var.kms_key_arn when given; CloudWatch's own encryption otherwise.
  name              = "/aws/lambda/${var.sweep_function_name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn
}

resource "aws_lambda_function" "sweep" {
  #checkov:skip=CKV_AWS_117:The sweep only calls S3; a VPC adds NAT or endpoint costs the example does not need.
  #checkov:skip=CKV_AWS_116:A failed scheduled run is redone by the next one (expire and gc are idempotent); a DLQ would hold nothing worth replaying.
  #checkov:skip=CKV_AWS_272:Code signing needs a signing profile the operator owns.
  #checkov:skip=CKV_AWS_173:The environment holds only the bucket name, prefix and retention settings, no secrets.
  #checkov:skip=CKV_AWS_115:One run a schedule period; reserving concurrency would carve capacity out of the account's shared pool for nothing.
  function_name    = var.sweep_function_name
  role             = aws_iam_role.sweep.arn
  runtime          = var.runtime
  architectures    = [var.architecture]
  handler          = "sweep_lambda.handler"
  filename         = data.archive_file.package.output_path
  source_code_hash = data.archive_file.package.output_base64sha256
  timeout          = 900
  memory_size      = 512
  kms_key_arn      = var.kms_key_arn

  tracing_config {
    mode = "Active"
  }

  environment {
    variables = {
      S3LOG_BUCKET                = module.s3log.bucket_name
      S3LOG_PREFIX                = module.s3log.prefix
      S3LOG_IDLE_DAYS             = tostring(var.idle_days)
      S3LOG_GC_OLDER_THAN_MINUTES = tostring(var.gc_older_than_minutes)
      S3LOG_DRY_RUN               = var.sweep_dry_run ? "1" : "0"
    }
  }

  depends_on = [
    aws_cloudwatch_log_group.sweep,
    aws_iam_role_policy.sweep,
    aws_iam_role_policy_attachment.sweep_s3,
    aws_iam_role_policy_attachment.sweep_xray,
  ]
}

resource "aws_cloudwatch_event_rule" "sweep" {
  name_prefix         = "s3log-sweep-"
  description         = "Run the s3log retention sweep (expire idle sessions, then gc)."
  schedule_expression = var.sweep_schedule
}

resource "aws_cloudwatch_event_target" "sweep" {
  rule = aws_cloudwatch_event_rule.sweep.name
  arn  = aws_lambda_function.sweep.arn
}

resource "aws_lambda_permission" "sweep" {
  statement_id  = "AllowScheduledSweep"
  action        = "lambda:InvokeFunction"
  function_name = aws_lambda_function.sweep.function_name
  principal     = "events.amazonaws.com"
  source_arn    = aws_cloudwatch_event_rule.sweep.arn
}

output "function_name" {
  description = "The worker function."
  value       = aws_lambda_function.worker.function_name
}

output "sweep_function_name" {
  description = "The retention-sweep function."
  value       = aws_lambda_function.sweep.function_name
}

output "bucket_name" {
  description = "The s3log bucket."
  value       = module.s3log.bucket_name
}

output "bucket_region" {
  description = "The region the bucket lives in."
  value       = module.s3log.bucket_region
}
