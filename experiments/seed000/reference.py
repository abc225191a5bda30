"""Seed 000's own numbers (000_5c16e7e3adfcfff6.txt), printed beside ours.

Validation losses of the ~1B-total 10-layer interleaved MoE, 32 -> 64 experts
(Tables 3, 4, 8, 11, 12) and of the 8-layer top-1 MoE (Table 5). Efficiencies
are the paper's (percent).
"""

# Table 3(a): tau / T -> (Fixed-32, Upcycled, Fixed-64, Eff. %), T = 100K.
TABLE3A = {0.05: (2.804, 2.753, 2.741, 81.0), 0.12: (2.805, 2.754, 2.754, 100.0),
           0.25: (2.806, 2.754, 2.754, 100.0), 0.38: (2.806, 2.757, 2.757, 100.0),
           0.50: (2.809, 2.759, 2.758, 98.0)}

# Table 3(b): CPT / tau -> (Fixed-32, Upcycled, Fixed-64, Eff. %), tau = 50K
# (CPT 5K, 13K, 25K, 38K, 51K steps).
TABLE3B = {0.10: (2.850, 2.833, 2.801, 34.7), 0.26: (2.835, 2.803, 2.785, 64.0),
           0.50: (2.823, 2.780, 2.772, 84.3), 0.76: (2.815, 2.769, 2.763, 88.5),
           1.02: (2.809, 2.759, 2.758, 98.0)}

# Table 4: CPT -> losses of Fixed-32, Fixed-64, Random, Uniform, ||w||^2,
# ||g||.||w||, ||g||^2, ||g||^2/H.
TABLE4_COLUMNS = ('fixed', 'fixed2x', 'random', 'uniform', 'weight_norm', 'saliency',
                  'grad_norm', 'curvature')
TABLE4 = {0.25: (2.857, 2.808, 3.107, 2.853, 2.846, 2.846, 2.844, 2.845),
          0.50: (2.835, 2.785, 3.010, 2.809, 2.807, 2.809, 2.804, 2.805),
          0.75: (2.821, 2.769, 2.969, 2.787, 2.785, 2.778, 2.773, 2.776),
          1.00: (2.809, 2.758, 2.963, 2.769, 2.771, 2.766, 2.759, 2.768)}

# Table 5 (8-layer, top-1, uniform duplication): target K/E -> (Fixed-E,
# Fixed-mE, expert upcycling, sparse upcycling).
TABLE5 = {0.25: (3.085, 3.056, 3.061, 3.087), 0.125: (3.056, 3.018, 3.025, 3.086),
          0.0625: (3.018, 2.986, 2.992, 3.069), 0.0313: (2.894, 2.788, 2.808, 3.049)}

# Table 8: the best variant of each category, as (the seed's variant, val
# loss), keyed by our heuristic names (moe_jax/upcycle/heuristics.py; our
# expert defaults are these variants, our router defaults are our reading of
# Table 10's qualitative names). Where Table 8 omits a category, the best row
# of Table 11 / 12; shuffle_columns is in neither. Copy baseline 2.76858.
TABLE8_EXPERT = {
    'copy': ('-', 2.76858), 'scaled_copy': ('s=0.90', 2.76815),
    'copy_noise': ('lambda=0.01', 2.76859), 'interpolate': ('alpha=0.2', 2.76888),
    'sparse_code_mix': ('dict=1024', 2.76938), 'svd_perturb': ('values only', 2.76938),
    'drop_upcycle': ('drop=0.3 (Xavier)', 2.77043), 'svd_mix': ('ratio=0.3', 2.77472),
    'orthogonal': ('standard', 2.77487), 'shuffle_columns': ('not reported', None)}
TABLE8_ROUTER = {
    'copy': ('-', 2.76858), 'interpolate': ('heavy', 2.76776),
    'svd_perturb': ('moderate', 2.76816), 'copy_noise': ('very light', 2.76819),
    'temperature_scaled': ('sharp', 2.76847), 'adversarial': ('light', 2.76848),
    'bias_only': ('all layers (Table 12)', 2.76836), 'scaled_copy': ('sharp (Table 12)', 2.76860),
    'perturb_new_only': ('light (Table 12)', 2.76843), 'orthogonal': ('- (Table 12)', 2.76867)}

# §5.3.2: Spearman rank correlation of loss at the upcycling boundary with
# terminal loss over all heuristic and utility runs (n = 65).
SPEARMAN = dict(val=0.80, train=0.86, n=65)
