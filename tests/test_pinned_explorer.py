"""Notebook 08's tiles explorer: its block map has queries down and keys across.

Found unpinned by mutation testing (``make mutate``): the map could swap its query and key
axes and every test passed. The expected map is written from the causal rule (a key after
every query of a tile is skipped), not read from the explorer.
"""

from __future__ import annotations

import numpy as np

from mhsa_helpers.lessons.attention_at_scale import tiles_explorer


def test_causal_block_map_has_queries_down_and_keys_across():
    explorer = tiles_explorer(tile_size=4, causal=True)
    try:
        blocks = np.asarray(explorer.data["blocks"])
        assert blocks.shape == (16, 16)
        # Row = query, column = key. Query 0 sees key 0 only: the tile of keys 12..15 lies entirely
        # after the tile of queries 0..3, so it is skipped (0); the tile on the diagonal is masked (0.5).
        assert blocks[0, 15] == 0.0 and blocks[0, 0] == 0.5
        # The last query tile sees every earlier key tile in full (1: computed).
        assert blocks[15, 0] == 1.0 and blocks[15, 15] == 0.5
        expected = np.zeros((16, 16))
        for q in range(16):
            for k in range(16):
                q_tile, k_tile = q // 4, k // 4
                expected[q, k] = 1.0 if k_tile < q_tile else 0.5 if k_tile == q_tile else 0.0
        assert np.array_equal(blocks, expected)
        # A tile size that does not divide 16: tiles of 5 queries x 5 keys (the last one shorter).
        blocks = np.asarray(explorer.update(tile_size=5).data["blocks"])
        assert blocks[4, 5] == 0.0 and blocks[5, 4] == 1.0 and blocks[5, 9] == 0.5
    finally:
        explorer.close()
