"""Importer for Agent-World's released environments (``environment_mix/``): ``agentworld/<id>``.

``import_directory`` validates and copies a release into the imported root and replays its
questions; the ``agentworld`` namespace of the environment registry then resolves the copies.
"""

from environments.registry import register_namespace

from .errors import MalformedEnvironment
from .importer import EnvironmentRow, ImportReport, import_directory
from .questions import ImportedQuestion, ToolCall
from .release import NAMESPACE
from .store import imported_root, list_imported, load_imported, load_questions

register_namespace(NAMESPACE, load_imported, list_imported)

__all__ = [
    "NAMESPACE",
    "EnvironmentRow",
    "ImportReport",
    "ImportedQuestion",
    "MalformedEnvironment",
    "ToolCall",
    "import_directory",
    "imported_root",
    "list_imported",
    "load_imported",
    "load_questions",
]
