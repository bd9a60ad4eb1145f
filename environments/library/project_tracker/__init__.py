"""project_tracker: a software project and issue tracker (projects, members, issues, sprints, comments)."""

from environments.library.project_tracker import seed, tools
from environments.library.project_tracker.core import TODAY, env

__all__ = ["TODAY", "env", "seed", "tools"]
