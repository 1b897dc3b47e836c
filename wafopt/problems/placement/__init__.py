# the module that makes the compiled placement kernels ready, which a method using them lists as a
# library to load before its clock (wafopt.core.registry.loads; see that module)
KERNELS = ("wafopt.problems.placement.kernels",)
