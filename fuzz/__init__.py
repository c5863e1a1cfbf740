"""Fuzzing pegasus's readers of untrusted bytes (issue 35): seeded mutation of a corpus of valid files kept in
the repository (fuzz/corpus/<target>/), and coverage-guided runs with atheris where it is installed.

The property every target checks: whatever the bytes, the reader ends in success or in a ``PegasusError`` (the
one-line error, exit 2) within a time and memory bound — never another exception, a hang or a crash. Each
input that broke it is kept in fuzz/regressions/<target>/ and replayed by the tests.
"""
