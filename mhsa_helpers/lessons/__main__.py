"""``python -m mhsa_helpers.lessons --markdown``: print the README's table of the series."""

from __future__ import annotations

import argparse

from . import LESSONS, markdown_table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m mhsa_helpers.lessons", description=__doc__)
    parser.add_argument("--markdown", action="store_true", help="print the README's table of the series")
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown_table())
    else:
        for item in LESSONS:
            print(f"{item.number:02d}  {item.slug:<18} {item.notebook}")


if __name__ == "__main__":
    main()
