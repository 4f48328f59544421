"""commbench's version: stated here once. pyproject.toml reads it (setuptools' dynamic
`attr`), `commbench.__version__` re-exports it, and the modules that stamp it into what they
write (run context, reports, `--version`) import it from here, a leaf, never from the
package's top."""

VERSION = "0.1.0"
