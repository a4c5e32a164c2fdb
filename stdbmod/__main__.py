"""`python -m stdbmod` runs the command line."""

from stdbmod.cli import main

if __name__ == "__main__":
    main()
