from kgov.cli import main

raise SystemExit(main())
