import sys

from sparksim.cli import main

sys.exit(main())
