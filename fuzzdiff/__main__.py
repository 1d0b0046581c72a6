import sys

from fuzzdiff.cli import main

sys.exit(main())
