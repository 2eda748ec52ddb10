import sys

from axe.cli import main

sys.exit(main())
