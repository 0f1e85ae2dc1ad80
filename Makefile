# vsearch: PGXS build of vsearch.so.  The engine (gpu/) is built by CMake into $(BUILD_DIR) and
# linked in statically; with a CUDA toolkit the CUDA backend vsearch_cuda.so is built and
# installed beside vsearch.so.
#   make [VSEARCH_CUDA=auto|on|off] && make install

EXTENSION = vsearch
MODULE_big = vsearch
OBJS = $(patsubst %.c,%.o,$(sort $(wildcard extension/*.c)))
# The install script is assembled from extension/sql/*.sql in name order (one file per feature).
DATA_built = vsearch--0.1.0.sql

PG_CONFIG ?= pg_config
BUILD_DIR ?= build/$(VSEARCH_CUDA)
VSEARCH_CUDA ?= auto
CMAKE ?= cmake

ENGINE_LIB = $(BUILD_DIR)/gpu/libvsearch_engine.a
CUDA_BACKEND = $(BUILD_DIR)/gpu/vsearch_cuda.so

PG_CPPFLAGS = -I$(CURDIR)/gpu/include -I$(CURDIR)/extension
SHLIB_LINK = $(ENGINE_LIB) -lstdc++ -lm -lpthread -ldl
EXTRA_CLEAN = build

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS tracks no header dependencies: any extension header change rebuilds every object
$(OBJS): $(wildcard extension/*.h)

$(BUILD_DIR)/CMakeCache.txt:
	$(CMAKE) -S $(CURDIR) -B $(BUILD_DIR) -DVSEARCH_CUDA=$(VSEARCH_CUDA) -DCMAKE_BUILD_TYPE=RelWithDebInfo

# CMake tracks the engine's own dependencies; always ask it.
$(ENGINE_LIB): $(BUILD_DIR)/CMakeCache.txt FORCE
	$(CMAKE) --build $(BUILD_DIR) --target vsearch_engine -j $(or $(JOBS),2)
	@if grep -q '^VSEARCH_HAVE_CUDA:INTERNAL=ON' $(BUILD_DIR)/CMakeCache.txt && \
	    [ -n "$$(ls gpu/cuda 2>/dev/null)" ]; then \
	  $(CMAKE) --build $(BUILD_DIR) --target vsearch_cuda -j $(or $(JOBS),2); fi

$(shlib): $(ENGINE_LIB)

vsearch--0.1.0.sql: $(sort $(wildcard extension/sql/*.sql))
	cat $^ > $@

install: install-cuda-backend
install-cuda-backend: all
	@if [ -f $(CUDA_BACKEND) ]; then \
	  echo "installing $(CUDA_BACKEND)"; \
	  $(INSTALL_SHLIB) $(CUDA_BACKEND) '$(DESTDIR)$(pkglibdir)/vsearch_cuda.so'; fi

.PHONY: FORCE install-cuda-backend
FORCE:
