from wafopt.cli import main

raise SystemExit(main())
