"""``python -m maintd``: the same command line as the ``maintd`` script."""

from maintd.cli import main

if __name__ == "__main__":
    main()
