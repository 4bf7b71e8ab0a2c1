"""The orchestrator's sidecar: `selfbench-runner serve`.

request.py  the request and response documents (pure), the payload digest, the archive path
store.py    the durable job store (SQLite)
mailbox.py  the seed's mailbox protocol over a directory
service.py  admission, reuse, workers running `verify` as child processes, cancel, stop
http.py     the HTTP API (FastAPI + uvicorn), server-sent events, Prometheus metrics
"""
