"""Fitted parameters published in seed 002, usable wherever a fit is expected.

Table 2 (joint scaling laws, sec. 5): dense and MoE-from-scratch follow eq. 3
with N = N1 (also for MoE), upcycled follows eq. 12; all share E = 0.165.
"""
TABLE2_E = 0.165

PRESETS = {
    'table2_dense': {'form': 'chinchilla', 'params': {
        'A': 8.83, 'B': 12.3, 'alpha': 0.088, 'beta': 0.116, 'E': TABLE2_E}},
    'table2_moe': {'form': 'chinchilla', 'params': {
        'A': 32.0, 'B': 7.05, 'alpha': 0.161, 'beta': 0.080, 'E': TABLE2_E}},
    'table2_upcycled': {'form': 'joint', 'params': {
        'A': 16.3, 'alpha1': 0.043, 'alpha2': 0.085, 'alpha3': 7.98e-4, 'B': 8.53,
        'beta': 0.112, 'E': TABLE2_E}},
}
