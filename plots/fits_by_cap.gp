# (d) Fits or does not fit: one row per configuration, one column per memory cap (no cap last).
# Green trained (ok), orange trained after shrinking the micro-batch (fallback), red out of
# memory, grey invalid or error.
load scriptdir."/common.gp"
if (!exists("nx")) nx = 1
if (!exists("ny")) ny = 1
if (!exists("subtitle")) subtitle = ""
f = data("fits_by_cap.dat")
do for [fmt in "png svg"] {
    eval(term(fmt))
    set output outfile("fits_by_cap", fmt)
    set title "Does it fit? Each configuration under each memory cap\n".subtitle
    if (nx == 0) {
        eval(empty_panel("no rows in this CSV"))
    } else {
        set xlabel "memory cap (reserved bytes)"
        set xrange [-0.5:nx-0.5]
        set yrange [-0.5:ny-0.5]
        if (nx > 6) { set xtics rotate by -30 left noenhanced } else { set xtics noenhanced }
        set ytics noenhanced
        set grid noytics
        set border 15
        set key below horizontal maxrows 2
        psize = ny > 12 ? 2.0 : 4.0
        plot f using 1:2:3:xtic(5):ytic(6) with points pt 5 ps psize lc rgb variable notitle, \
             NaN with points pt 5 ps 2 lc rgb "#2ca02c" title "fits (ok)", \
             NaN with points pt 5 ps 2 lc rgb "#ff9f1c" title "fits with a smaller micro-batch (fallback)", \
             NaN with points pt 5 ps 2 lc rgb "#d62728" title "does not fit (oom)", \
             NaN with points pt 5 ps 2 lc rgb "#9e9e9e" title "invalid or error"
    }
    set output
}
