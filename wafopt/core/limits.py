"""Input limits: every bound an instance or solution file must respect, in one place.

Files are untrusted. These limits keep reading and validating any accepted file under 1 s and
2 GB of memory, and every accepted number inside the range the solvers handle exactly (volumes
within 2^53, the largest integer a double holds exactly; capacities and byte counts within 1e18,
so sums and products of a few of them stay finite). docs/instances.md lists them for users.
"""

# --- reading (wafopt.core.files) --------------------------------------------------------------
MAX_FILE_BYTES = 8 * 2**20      # an instance or solution file
MAX_DEPTH = 64                  # nesting of mappings and lists
MAX_INSTANCE_NODES = 100_000    # mappings, lists and scalars of an instance, aliases counted per use
MAX_YAML_NODES = MAX_INSTANCE_NODES  # any YAML file (PyYAML builds about 150,000 values a second)
MAX_JSON_NODES = 1_000_000      # any JSON file (solution files; JSON parses 10x faster than YAML)
MAX_INT_DIGITS = 30             # integer literals: |n| < 10^30
MAX_MESSAGE_CHARS = 400         # an error message, value excerpts truncated (CLI lines stay <= 500)
MAX_VALUE_CHARS = 60            # the offending value quoted in a message

# --- sizes ----------------------------------------------------------------------------------
MAX_MESH_SIDE = 256             # rows, cols of a mesh or wafer
MAX_DIES = 4096                 # rows * cols: the hop-distance matrix stays at 128 MB (int64)
MAX_GPUS = 16384                # a cluster's nodes * GPUs per node (solving 16K GPUs takes about a minute)
MAX_STAGES = 1024               # pipeline stages of a kernel instance
MAX_UNITS = 256                 # operator units of a recompute instance
MAX_LAYERS = 10_000             # layers of a stage or of an LLM
MAX_MICROBATCHES = 1_000_000    # micro-batches per iteration, in-flight micro-batches
MAX_SCENARIO_MICROBATCHES = 65_536  # ... of a scenario (global batch / micro-batch): its schedule is simulated
MAX_FLOWS = 10_000              # flows of a placement or routing instance
MAX_TILE_SHAPES = 64            # candidate tile shapes of a placement instance
MAX_ROUTE_TABLE = 2**27         # slots^2 x directed links of a tile shape with Mem_pairs: the XY route of
                                # every slot pair, one byte each (128 MB; 160 slots on 80 x 8 dies: 61 MB)
MAX_DETOUR = 8                  # extra hops of a routing path (path enumeration is exponential in it)
MAX_CHUNKS = 2**40              # Mem_pair chunks of one sender or helper (overflow or spare / chunk)
MAX_COUNT = 10**9               # any other count (sequence length, batch, hidden size, vocabulary)
MAX_NAME_CHARS = 200            # names and labels
MAX_TEXT_CHARS = 10_000         # descriptions and other free text

# --- magnitudes -----------------------------------------------------------------------------
MAX_VOLUME = float(2**53)       # a flow volume (placement, routing): integers up to it are exact
MAX_AMOUNT = 1e18               # bytes, capacities, spares, overflows, chunk sizes, any quantity
MAX_SECONDS = 1e12              # times: compute, recomputation, link latency
MIN_RATE = 1e-9                 # bandwidths: volume / bandwidth stays finite
