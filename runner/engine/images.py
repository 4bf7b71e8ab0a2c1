"""The runner's task images on an engine, for the cache budget: each with the layers it adds
above its base and whether a container uses it."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import docker
from docker.errors import APIError, NotFound

from runner.engine.calls import engine_errors, explain
from runner.plan.labels import LABEL_FROM_ID, LABEL_KIND, LABEL_RUNNER

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class TaskImage:
    id: str
    tags: tuple[str, ...]
    layers: tuple[tuple[str, int], ...]  # (layer id, bytes) above the image's base
    created: float
    in_use: bool


# An image id names its content, history included: each image's layers are read once per
# process. A service applies its budget after every verification, and reading the history of
# every task image each time is one engine call per image.
_LAYERS: dict[str, tuple[tuple[str, int], ...]] = {}
_MAX_LAYERS_CACHED = 20_000


def _layers(
    api: docker.APIClient, image_id: str, base_id: str | None
) -> tuple[tuple[str, int], ...] | None:
    """The (layer id, bytes) an image adds above its base; None when it is gone."""
    cached = _LAYERS.get(image_id)
    if cached is not None:
        return cached
    with engine_errors(f"reading the history of {image_id[:19]}"):
        try:
            history = api.history(image_id)  # type: ignore[no-untyped-call]
        except NotFound:
            return None
    layers: list[tuple[str, int]] = []
    for index, entry in enumerate(history):
        layer = str(entry.get("Id") or "")
        if base_id and layer == base_id:
            break
        key = layer if layer and layer != "<missing>" else f"{image_id}#{index}"
        layers.append((key, max(0, int(entry.get("Size") or 0))))
    if len(_LAYERS) >= _MAX_LAYERS_CACHED:
        _LAYERS.clear()
    _LAYERS[image_id] = result = tuple(layers)
    return result


def task_images(api: docker.APIClient) -> list[TaskImage]:
    """The runner's task images (agent and verifier, by label), each with its own layers
    (those above the base it was built from) and whether a container uses it."""
    with engine_errors("listing the runner's images"):
        images = api.images(filters={"label": [f"{LABEL_RUNNER}=1"]})
        containers = api.containers(all=True)
    used = {str(c.get("ImageID") or "") for c in containers}
    found = []
    for item in images:
        labels = item.get("Labels") or {}
        if labels.get(LABEL_KIND) not in ("agent", "verifier"):
            continue
        image_id = str(item["Id"])
        layers = _layers(api, image_id, labels.get(LABEL_FROM_ID))
        if layers is None:
            continue  # removed since the listing (another budget pass, a gc): nothing to count
        found.append(
            TaskImage(
                id=image_id,
                tags=tuple(item.get("RepoTags") or ()),
                layers=layers,
                created=float(item.get("Created") or 0),
                in_use=image_id in used or int(item.get("Containers") or 0) > 0,
            )
        )
    return found


def remove_task_image(api: docker.APIClient, image: TaskImage) -> bool:
    """Untag (and so delete) a task image; never forced, so an image a container started
    meanwhile stays."""
    try:
        for ref in image.tags or (image.id,):
            with contextlib.suppress(NotFound):
                api.remove_image(ref, force=False)
        return True
    except APIError as exc:
        log.info("image %s not removed: %s", image.id[:19], explain(exc))
        return False
