"""What a request may ask of this sidecar: which repositories (git URLs matching an
--allow-repo-url pattern; local paths under an --allow-repo-root), and the refusal it gets
otherwise."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from runner.base.safeio import is_within
from runner.sidecar.request import ErrorBody, ErrorDetail, VerificationRequest


class RequestRefusedError(Exception):
    """The request is well formed but not allowed here (a repository outside the allowed
    roots, a taken id or archive, a stopping sidecar)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        field: str | None = None,
        problems: list[ErrorDetail] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.problems = problems

    def body(self) -> ErrorBody:
        if self.problems is not None:
            problems = self.problems
        else:
            problems = [ErrorDetail(field=self.field, message=self.message)] if self.field else []
        return ErrorBody(code=self.code, message=self.message, problems=problems)


class RepositoryPolicy:
    def __init__(self, *, roots: tuple[Path, ...], urls: tuple[str, ...]) -> None:
        self.roots = roots
        self.urls = urls  # shell-style patterns of the whole URL

    def repository(self, request: VerificationRequest) -> str | None:
        """The repository this request may use: git URLs matching an --allow-repo-url
        pattern, local paths only (absolute and) under an allowed root, resolved through
        symbolic links."""
        from runner.compile.repository import is_remote

        spec = request.repo or request.definition_repo()
        where = "repo" if request.repo else "task.definition.repo"
        if spec is None:
            return None
        local = spec[len("file://") :] if spec.startswith("file://") else None
        if local is None and is_remote(spec):
            # Fetched from this host: only where the operator said requests may point.
            if any(fnmatch.fnmatchcase(spec, p) for p in self.urls):
                return spec
            allowed = (
                "it matches no --allow-repo-url pattern"
                if self.urls
                else "this sidecar allows no git URLs (start it with --allow-repo-url PATTERN)"
            )
            raise RequestRefusedError(
                "repository-refused", f"git URL {spec!r} refused: {allowed}", field=where
            )
        path = Path(local if local is not None else spec)
        if not path.is_absolute():
            raise RequestRefusedError(
                "repository-refused",
                f"{spec!r} is a relative path; the sidecar takes a git URL or an absolute "
                "path under an --allow-repo-root directory",
                field=where,
            )
        if not self.roots:
            raise RequestRefusedError(
                "repository-refused",
                f"local repository {spec!r} refused: this sidecar allows no local "
                "repositories (start it with --allow-repo-root DIR)",
                field=where,
            )
        real = Path(os.path.realpath(path))
        if not any(is_within(real, Path(os.path.realpath(r))) for r in self.roots):
            raise RequestRefusedError(
                "repository-refused",
                f"local repository {spec!r} is not under an --allow-repo-root directory",
                field=where,
            )
        return str(real)
