"""AWS Batch quota shares and service jobs, against moto's server extended by ``moto_batch``."""
