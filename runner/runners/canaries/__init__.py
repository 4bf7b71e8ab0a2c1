"""Canaries, derived on the trusted side at compile time (pure): runner.runners.canaries.derive
makes them; core holds what every language shares; python, javascript, golang, rust and shell
read each language's tests by its own grammar; exitcode picks the expected values of a task
judged by exit codes."""
