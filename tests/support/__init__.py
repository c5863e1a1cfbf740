"""Helpers the tests share (bundle runners, toolchains, model builders); no tests here."""
