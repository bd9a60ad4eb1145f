"""Build the seed database of every built-in environment into $ARENA_CACHE_DIR (run at image build time)."""

from environments.registry import builtin_names, load_environment
from environments.sdk.state import cache_dir, seed_path


def main() -> None:
    """Build every built-in seed; any failure fails the image build."""
    cache_dir().mkdir(parents=True, exist_ok=True)
    for name in builtin_names():
        print(f"seed {name}: {seed_path(load_environment(name))}", flush=True)


if __name__ == "__main__":
    main()
