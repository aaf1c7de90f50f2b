"""The kernel language: types, the typed IR, errors with source locations, builtins, the frontend
(Python AST to IR), name resolution and the checker. It imports nothing above it (no kernel
object, no backend, no op layer), so backends can depend on it alone; import-linter contracts in
pyproject.toml keep it so."""
