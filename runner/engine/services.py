"""A gate's services and its own network, and removing what the runner made: by label, and what
runner processes that no longer exist left behind."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, DockerException, NotFound

from runner.base.logs import CappedLog
from runner.engine.calls import TRANSIENT, engine_errors
from runner.engine.owners import owner_alive
from runner.plan.labels import LABEL_OWNER, LABEL_RUNNER
from runner.plan.types import ServicePlan


class DockerService:
    def __init__(self, api: docker.APIClient, container_id: str, name: str) -> None:
        self.api = api
        self.id = container_id
        self.name = name

    def health(self) -> str:
        try:
            state = self.api.inspect_container(self.id)["State"]
        except (DockerException, *TRANSIENT):
            return "exited"
        if not state.get("Running"):
            return "exited"
        return str((state.get("Health") or {}).get("Status") or "starting")

    def save_logs(self, path: Path, *, limit: int) -> list[str]:
        capped = CappedLog(path, limit)
        try:
            for chunk in self.api.logs(self.id, stream=True, follow=False, timestamps=False):
                capped.write(chunk)
        except (DockerException, *TRANSIENT):
            pass
        finally:
            capped.close()
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        return lines[-10:]


@contextlib.contextmanager
def gate_network(
    api: docker.APIClient, name: str, *, labels: Mapping[str, str], keep: bool
) -> Iterator[str]:
    """A gate's own network. Internal: its services reach nothing beyond it."""
    with engine_errors(f"creating network {name}"):
        created = api.create_network(
            name, driver="bridge", internal=True, labels=dict(labels), check_duplicate=True
        )
    try:
        yield str(created["Id"])
    finally:
        if not keep:
            _remove_network(api, str(created["Id"]))


def _remove_network(api: docker.APIClient, network: str) -> None:
    with contextlib.suppress(DockerException, *TRANSIENT):
        for item in api.inspect_network(network).get("Containers") or {}:
            with contextlib.suppress(DockerException, *TRANSIENT):
                api.disconnect_container_from_network(item, network, force=True)
        api.remove_network(network)


@contextlib.contextmanager
def service_container(
    api: docker.APIClient, plan: ServicePlan, *, network: str, keep: bool
) -> Iterator[DockerService]:
    check = plan.healthcheck
    seconds = 1_000_000_000
    with engine_errors(f"starting service {plan.name} ({plan.image})"):
        created = api.create_container(
            plan.image,
            command=list(plan.command) if plan.command else None,
            name=plan.container,
            labels=dict(plan.labels),
            environment=dict(plan.env),
            detach=True,
            healthcheck={
                "test": list(check.test),
                "interval": int(check.interval_seconds * seconds),
                "timeout": int(check.timeout_seconds * seconds),
                "retries": check.retries,
                "start_period": int(check.start_period_seconds * seconds),
            },
            host_config=api.create_host_config(
                nano_cpus=int(plan.limits.cpus * 1e9),
                mem_limit=plan.limits.memory_mb * 1024 * 1024,
                pids_limit=plan.limits.pids,
                network_mode=network,
            ),
            # docker-py takes {network: endpoint}; types-docker says otherwise.
            networking_config=api.create_networking_config(
                {network: api.create_endpoint_config(aliases=[plan.name])}  # type: ignore[arg-type]
            ),
        )
    service = DockerService(api, str(created["Id"]), plan.name)
    try:
        with engine_errors(f"starting service {plan.name} ({plan.image})"):
            api.start(service.id)
        yield service
    finally:
        if not keep:
            with contextlib.suppress(DockerException, *TRANSIENT):
                api.remove_container(service.id, force=True, v=True)


def remove_labelled(
    api: docker.APIClient, labels: Mapping[str, str], *, images: bool = False
) -> int:
    """Remove every container, network and volume (and image) carrying `labels`."""
    filters: dict[str, Any] = {"label": [f"{key}={value}" for key, value in labels.items()]}
    removed = 0
    with engine_errors("cleaning up"):
        for item in api.containers(all=True, filters=filters):
            with contextlib.suppress(NotFound, APIError):
                api.remove_container(item["Id"], force=True, v=True)
                removed += 1
        for network in api.networks(filters=filters):
            with contextlib.suppress(NotFound, APIError):
                api.remove_network(network["Id"])
                removed += 1
        for volume in (api.volumes(filters=filters) or {}).get("Volumes") or []:
            with contextlib.suppress(NotFound, APIError):
                api.remove_volume(volume["Name"], force=True)
                removed += 1
        if images:
            for image in api.images(filters=filters):
                with contextlib.suppress(NotFound, APIError):
                    api.remove_image(image["Id"], force=True)
                    removed += 1
    return removed


def reap_stale(api: docker.APIClient) -> int:
    """Remove containers left by runner processes of this host that no longer exist (a
    runner killed with SIGKILL cannot clean up after itself)."""
    removed = 0
    with engine_errors("looking for stale containers"):
        for item in api.containers(all=True, filters={"label": f"{LABEL_RUNNER}=1"}):
            owner = (item.get("Labels") or {}).get(LABEL_OWNER)
            if owner and not owner_alive(owner):
                with contextlib.suppress(NotFound, APIError):
                    api.remove_container(item["Id"], force=True, v=True)
                    removed += 1
    return removed
