from wafopt.launch import main

raise SystemExit(main())
