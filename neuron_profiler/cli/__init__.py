"""Command-line interface: one module per subcommand, argument parsing only."""
