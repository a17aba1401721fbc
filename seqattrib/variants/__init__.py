"""Variant effects: reference vs alternative predictions (and attributions) of the variants of a
VCF/BCF file or a table, in their genome context, on the same engine as every method.

Only numpy is imported here; pysam (VCF/BCF) and pyarrow (Parquet) when first needed
(``pip install 'seqattrib[variants]'``).
"""

from __future__ import annotations

from .effects import VariantEffects, variant_effects
from .table import EffectsTable, read_effects
from .table_merge import merge_effects

__all__ = ["EffectsTable", "VariantEffects", "merge_effects", "read_effects", "variant_effects"]
