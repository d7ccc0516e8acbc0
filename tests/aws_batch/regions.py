"""The emulator's regions that behave apart, in a module of their own so that a test naming one does not
import the emulator (moto's AWS Batch: about a second of every xdist worker's collection)."""

from __future__ import annotations

#: The region whose emulator answers a repeated SubmitServiceJob (identical request, same ``clientToken``)
#: with AWS's documented rejection (a ``ClientException``); every other region's answers the first job.
#: One server serves both, so a test picks the behaviour by the region it calls.
REJECTING_REGION = "eu-west-3"
