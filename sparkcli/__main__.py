"""`python -m sparkcli …`: the same as `sparkpanel …`."""

import sys

from sparkcli.program import main

sys.exit(main())
