"""The ``arena view`` web app: read-only pages over the store, rendered on the server (Starlette, Jinja2).

Every value from the store goes through Jinja2's autoescaping; pages load nothing but this app's own
stylesheet; a missing run or episode is a 404 page.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from arena.rollout.episode import SYSTEM_PROMPT
from arena.store import Database
from arena.view import queries
from arena.view.charts import success_png
from arena.view.queries import BREAKDOWNS, EpisodeFilters, NotFound, RunFilters

HERE = Path(__file__).resolve().parent


class BadRequest(ValueError):
    """A query parameter has a value the page cannot use."""


def _pretty(value: Any) -> str:
    """JSON indented for reading (a plain string: the template escapes it)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str, sort_keys=False)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def episode_url(run_id: str, task_id: str, repeat: int) -> str:
    return f"/runs/{quote(run_id, safe='')}/episodes/{repeat}/{quote(task_id, safe='')}"


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters |= {
        "pretty": _pretty,
        "json": lambda value: json.dumps(value, ensure_ascii=False, default=str),
        "pct": _pct,
        "q": lambda s: quote(str(s), safe=""),
        "combine_page": lambda query, page: {**query, "page": str(page)},
    }
    env.globals |= {"episode_url": episode_url, "urlencode": urlencode, "breakdown_names": BREAKDOWNS}
    return Jinja2Templates(env=env)


def _int(request: Request, name: str, default: int | None) -> int | None:
    raw = request.query_params.get(name, "")
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {raw!r}") from None


class Viewer:
    """The pages, over one open store."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.templates = _templates()

    def _page(self, request: Request, name: str, status: int = 200, **context: Any) -> Response:
        return self.templates.TemplateResponse(
            request, name, {"store": self.db.display_url, **context}, status_code=status
        )

    def runs(self, request: Request) -> Response:
        params = request.query_params
        filters = RunFilters(params.get("kind", ""), params.get("policy", ""), params.get("q", ""))
        with self.db.session() as session:
            lines = queries.list_runs(session, filters)
            kinds, policies = queries.run_kinds_and_policies(session)
        return self._page(
            request,
            "runs.html",
            runs=lines,
            filters=filters,
            kinds=kinds,
            policies=policies,
            truncated=len(lines) == queries.RUNS_SHOWN,
        )

    def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        params = request.query_params
        filters = EpisodeFilters(
            env=params.get("env", ""),
            level=_int(request, "level", None),
            category=params.get("category", ""),
            failure_mode=params.get("failure_mode", ""),
            passed=params.get("passed", ""),
            task=params.get("task", ""),
        )
        if filters.passed not in ("", "yes", "no", "unscored"):
            raise BadRequest(f"passed must be yes, no or unscored, got {filters.passed!r}")
        page = _int(request, "page", 1) or 1
        with self.db.session() as session:
            run = queries.get_run(session, run_id)
            if run.kind == "evolve":
                return RedirectResponse(f"/evolve/{quote(run_id, safe='')}", status_code=303)
            summary = queries.run_summary(session, run_id)
            context = {
                "run": run,
                "rate": summary.rate,
                "breakdowns": summary.breakdowns,
                "episodes": queries.episode_page(session, run_id, filters, page, summary.rate.episodes),
                "filters": filters,
            }
        return self._page(request, "run.html", **context)

    def episode(self, request: Request) -> Response:
        run_id, task_id = request.path_params["run_id"], request.path_params["task_id"]
        with self.db.session() as session:
            detail = queries.episode(session, run_id, task_id, request.path_params["repeat"])
        return self._page(request, "episode.html", e=detail, system_prompt=SYSTEM_PROMPT)

    def _evolve_run(self, run_id: str) -> tuple[Any, list[queries.Round]]:
        with self.db.session() as session:
            run = queries.get_run(session, run_id)
        if run.kind != "evolve":
            raise NotFound(f"run {run_id!r} is an {run.kind} run, not an evolve run")
        return run, queries.evolve_rounds(run)

    def evolve(self, request: Request) -> Response:
        run, rounds = self._evolve_run(request.path_params["run_id"])
        by_index = {r.index: r for r in rounds}
        first = _int(request, "a", rounds[0].index if rounds else 0)
        last = _int(request, "b", rounds[-1].index if rounds else 0)
        flipped = None
        if first in by_index and last in by_index and first != last:
            with self.db.session() as session:
                flipped = queries.flips(
                    session, by_index[first].eval["run_id"], by_index[last].eval["run_id"]
                )
        stages = (run.summary or {}).get("stages", {})
        return self._page(
            request,
            "evolve.html",
            run=run,
            rounds=rounds,
            sets=stages.get("sets"),
            a=first,
            b=last,
            flipped=flipped,
            run_a=by_index[first].eval["run_id"] if first in by_index else None,
            run_b=by_index[last].eval["run_id"] if last in by_index else None,
        )

    def evolve_chart(self, request: Request) -> Response:
        _run, rounds = self._evolve_run(request.path_params["run_id"])
        return Response(success_png(rounds), media_type="image/png", headers={"Cache-Control": "no-store"})

    def compare(self, request: Request) -> Response:
        a, b = request.query_params.get("a", ""), request.query_params.get("b", "")
        if not a or not b:
            raise BadRequest("compare needs two runs: /compare?a=RUN&b=RUN")
        with self.db.session() as session:
            queries.get_run(session, a)
            queries.get_run(session, b)
            flipped = queries.flips(session, a, b)
        return self._page(request, "compare.html", run_a=a, run_b=b, flipped=flipped)

    async def not_found(self, request: Request, exc: Exception) -> Response:
        message = str(exc) if isinstance(exc, NotFound) else f"no page at {request.url.path}"
        return self._page(request, "error.html", status=404, title="Not found", message=message)

    async def bad_request(self, request: Request, exc: Exception) -> Response:
        return self._page(request, "error.html", status=400, title="Bad request", message=str(exc))


def _not_found_only(viewer: Viewer) -> Any:
    async def handle(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException) and exc.status_code != 404:
            return Response(exc.detail, status_code=exc.status_code)
        return await viewer.not_found(request, exc)

    return handle


def create_app(db: Database) -> Starlette:
    """The viewer over ``db`` (the caller keeps it open while the app serves, and closes it)."""
    viewer = Viewer(db)
    routes = [
        Route("/", viewer.runs, name="runs"),
        Route("/runs/{run_id}", viewer.run, name="run"),
        Route("/runs/{run_id}/episodes/{repeat:int}/{task_id:path}", viewer.episode, name="episode"),
        Route("/evolve/{run_id}", viewer.evolve, name="evolve"),
        Route("/evolve/{run_id}/success.png", viewer.evolve_chart, name="evolve_chart"),
        Route("/compare", viewer.compare, name="compare"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handlers = {
        NotFound: viewer.not_found,
        BadRequest: viewer.bad_request,
        HTTPException: _not_found_only(viewer),
    }
    return Starlette(routes=routes, exception_handlers=handlers)  # type: ignore[arg-type]
