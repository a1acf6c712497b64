"""Tests of vitzoo/commands/: one file per subcommand (a package, so that test_predict.py here
and tests/test_predict.py, which tests vitzoo/predict.py, do not collide)."""
