import sys

from hubsim.cli import main

sys.exit(main())
