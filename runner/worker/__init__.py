"""`worker`: the runner on Temporal. The `selfbench.verify` activity runs the sidecar's requests
through the same service as `serve` (runner.sidecar.service), and the `selfbench.batch`
workflow fans many of them out with a concurrency bound."""
