"""The artifact store a fleet shares: content-addressed blobs (task files, repository bundles,
run archives, result pages; the sha256 digest is the key) and small keyed records (a run's
pointer), in a shared directory or S3-compatible object storage.

address.py  store URLs and run addresses (pure)
store.py    the two backends and the blob and record calls they share; the local blob cache
runs.py     a run's archive in and out of the store (packed, published, fetched for reading)
"""
