"""What a sweep chart and the level table show, whoever draws them: the series and their symbols (chart) and one
frozen row per level (levelrow)."""
