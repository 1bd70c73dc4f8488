"""What sweep and study files hold, read and checked before anything runs: the common file reading
(specfile), a sweep file (sweep_spec) with its check kinds (checkkinds) and the file it may extend
(extends), a study file (study_spec) with its search space (search), and one cell's values
(cell_spec). Nothing here runs a cell, and importing these modules imports no torch."""
