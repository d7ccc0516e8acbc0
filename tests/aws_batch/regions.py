"""The emulator's regions that behave apart, in a module of their own so that a test naming one does not
import the emulator (moto's AWS Batch: about a second of every xdist worker's collection)."""

from __future__ import annotations

#: The region whose emulator answers a repeated SubmitServiceJob (identical request, same ``clientToken``)
#: with the first job; every other region's rejects it, as AWS documents (a ``ClientException``). One
#: server serves both, so a test picks the behaviour by the region it calls.
REPLAYING_REGION = "eu-west-3"
