"""FAISS on the GPU: a clear refusal without one; the same answers as the CPU with one."""

import faiss
import numpy as np
import pytest

from index_builder.retrieval.faiss_gpu import gpu_resources, has_faiss_gpu, index_to_gpu

pytestmark = pytest.mark.unit

GPU = has_faiss_gpu()


@pytest.mark.skipif(GPU, reason="checks the refusal on a host without FAISS GPU")
def test_gpu_search_without_a_gpu_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="RAGMT_DEVICE=cpu"):
        gpu_resources(0)


@pytest.mark.cuda
@pytest.mark.skipif(not GPU, reason="needs FAISS with GPU support and a GPU")
def test_gpu_flat_and_ivf_answer_as_the_cpu() -> None:
    rng = np.random.default_rng(0)
    xb = rng.standard_normal((5000, 64)).astype("float32")
    xq = rng.standard_normal((50, 64)).astype("float32")
    flat = faiss.IndexFlatL2(64)
    flat.add(xb)
    d_cpu, i_cpu = flat.search(xq, 10)
    d_gpu, i_gpu = index_to_gpu(flat, 0).search(xq, 10)
    assert (i_cpu == i_gpu).mean() > 0.99
    np.testing.assert_allclose(d_cpu, d_gpu, rtol=1e-3, atol=1e-3)
    assert gpu_resources(0) is gpu_resources(0)  # one resources object per process and GPU
    hnsw = faiss.index_factory(64, "HNSW32")
    hnsw.add(xb)
    assert index_to_gpu(hnsw, 0) is hnsw  # no GPU HNSW in FAISS: stays on the CPU
