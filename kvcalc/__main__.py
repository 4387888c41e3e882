import sys

try:  # an interrupt while kvcalc.cli loads (before its own handlers are set) is one line too
    from kvcalc.cli import main
except KeyboardInterrupt:
    sys.stderr.write("kvcalc: error: interrupted\n")
    sys.exit(130)

if __name__ == "__main__":
    main()
