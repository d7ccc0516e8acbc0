"""Where a granted job trains: SageMaker (remote instances) or local processes on the worker's GPUs."""
