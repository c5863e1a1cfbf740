"""Scripts that (re)write the fuzz corpus: small valid files of each format, made with the framework itself
(``python -m fuzz.seeds.<target>``). The corpus they wrote is committed in fuzz/corpus/ so fuzzing needs no
framework to build it again."""
