"""Every layer family, built with Keras 3 (saved as .keras and .h5) and Keras 2 (tf-keras, saved as .h5),
imported from the file alone and compared with the framework's own ``model.predict`` (rtol 1e-4, atol 1e-5)."""

from __future__ import annotations

import pytest

from tests.importers.keras import models
from tests.importers.keras.harness import FORMATS, check_import

CASES = [pytest.param(builder, library, suffix, id=f"{builder.__name__}-{library}{suffix}")
         for builder in models.BUILDERS for library in getattr(builder, "libraries", FORMATS)
         for suffix in FORMATS[library]]


@pytest.mark.parametrize("builder, library, suffix", CASES)
def test_matches_framework(keras_model, builder, library, suffix):
    built = keras_model(builder, library)
    check_import(built.files[suffix], built)
