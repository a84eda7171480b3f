"""``python -m overlay.cli ARGS``: the ``overlay`` command."""

from overlay.cli import main

if __name__ == "__main__":
    main()
