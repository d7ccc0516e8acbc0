"""SageMaker backend, trigger and operator, against moto's server extended by ``moto_sagemaker``."""
