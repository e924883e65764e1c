"""AIO's native CPU library (C, built at first use): see tiers.native.build."""
from tiers.native.build import (DEFAULT_FLAGS, NativeKernelError, NativeLibrary, build_library, cache_dir,
                                native_library)

__all__ = ["DEFAULT_FLAGS", "NativeKernelError", "NativeLibrary", "build_library", "cache_dir", "native_library"]
