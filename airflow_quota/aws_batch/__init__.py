"""AWS Batch quota management: its documents (service environments, scheduling policies, job queues, quota
shares) read into our quota file and written out of it."""
