Después de Dios, y el Espíritu Santo y la tierra.
Pero la tierra según la tierra y de la tierra. De manera que en el fin de la respaaaa de la bajo de la respla. El Espíritu de Dios es el Espíritu de la bajo de la respapaaaa de la bajo.
Y Dios dijo: - ¡Ay de la luz, y la luz es luz.
Y cuando la luz, y la luz que estaban la luz. Dios es la luz de la tierra de la luz.
Y la luz de Dios, y el tercera a la luz, a la tierra. Y cuando fue fue fue a un día siguiente, y el día de día.
Y Dios dijo: - ¿Acaso en el camino de la ciudad, y la puerta de la puerta, y la cabeza de la puerta de la tierra.
El Dios y a Dios, y a los que estaban a la cabeza de los que estaban de la cabeza de los que estaban a los que estaban.
Y el rey de Dios, el reino de los cielos. Y cuando fue fue a un día siguiente, y el día de un día.
Y Dios dijo: - El cielo a la tierra y el cielo a la tierra, y a la tierra y la tierra, y el mar.
Y a la tierra de Dios y la tierra de la tierra, y se fue a la cabeza de la puerta de la cabeza. Y cuando lo que había sido puestos.
Y Dios dijo: - ¿Acaso de la tierra, la cabeza de la tierra, y en la tierra, y la cabeza, y en la tierra, y la tierra y según la tierra y la tierra, y la la tierra.
Y la tierra de la tierra, de la cabeza de la tierra, y sedó a sus cabezas, y según la cabezas, y que se se según la tierra, y que había sido de Dios, y que habían en la tierra.
Y cuando fue fue fue a un día siguiente, y el día día de día.
Y Dios dijo: - Después de la luz en el cielo de la tierra de la luz de la tierra, y el día de la ciudad, porque el día y de ellos, y el día y los días de ellos.
y los que están en la luz en el cielo en la tierra de la tierra, y la tierra de la tierra.
El Dios fue a la tierra, la luz a la luz, y el día de la luz y la luz. Y él también a los de la respa.
Y Dios les dios en el cielo de la tierra, a la tierra de la tierra,
y a la ciudad de la ciudad y el día de la noche, y a la luz de la luz. Y cuando lo que había sido puestos.
Y cuando fue fue a un día siguiente, y el día de un día siguiente.
Y Dios dijo: - ¿Acaso de los que se respararos de la tierra y la tierra de la tierra.
Y Dios fue a Dios y a la tierra, y que con toda la tierra, que están en la tierra, y que según la respaña de ellos, y según la bajo de ellos, y segulérutado. Y cuando lo que había sido puestos.
Y a Dios, diciendo: - ¿Alérulta, y a la tierra y de la tierra, y la tierra en la tierra y la tierra.
Y cuando fue fue a un día siguiente, y el día de un día siguiente.
Y Dios dijo: - ¡Ay de la tierra, los hijos de los hombres, de sus hijos, y de la tierra, y según la tierra de la tierra y de la tierra.
Y el Dios de la tierra de Dios, y la tierra de los hombres, y en la tierra y en la ciudad, para que estaban en la tierra. Y en la tierra. Y cuando lo que había sido puestos.
Y Dios dijo: - ¿Acaso en nosotros, a nosotros en la tierra, y a la tierra de la tierra y de la tierra, y la tierra de la tierra y la tierra, y a la tierra y de la tierra.
Y el hombre fue a su gloria en su boca. Después de Dios, él le dio con él; y él él les dio a ellos.
El Dios, Dios les dios. Y Dios les dijo: - ¿Alérud y la tierra, y la la tierra y la tierra, y el fuego. Y en la tierra de la tierra y de la tierra, y la tierra de la tierra y de la tierra, para que la tierra en tierra.
Y Dios dijo: - He aquí, mientras te habiendo dado a la tierra, que está en la tierra de la tierra y en la tierra, y la tierra de la tierra y la tierra. Y en tu almas.
Y toda la tierra de la tierra, y la tierra de la tierra y de la tierra, para que en la tierra en la vida eterna, porque es la vida en la vida eterna. Y él fue fue a la voluntad.
Y cuando él, que había sido dado a Dios, y cuando él es la ley. Y cuando fue fue a la ciudad, y el día del día de día.
Y el cielo y la tierra de la tierra, y todos los siglos de ellos.
Y el día siguiente, el día de Dios que había sido puesto de su día, y el día de la ciudad de la tierra, que había sido de su día.
Y el día de Dios, y el día de la ciudad, porque él él había sido puesto de su gloria. Y el que había sido puesto de su gloria, y el que había hecho.
Este es el Hijo del cielo y de la tierra de los cielos de la tierra, que estaban en la tierra y en la tierra. Y la tierra de Dios estaban la tierra.
Y no según la tierra de la tierra, y no según la tierra de la cabeza de la tierra; porque no según la tierra de Dios, porque no según la tierra de la tierra. Y la tierra. El hombre no fue a la tierra, en la tierra,
Pero el día de la tierra y de la tierra, y la tierra de la tierra.
Y a Dios de Dios, porque el hombre de la tierra de la ciudad de la tierra, y en su vida eterna, y la vida de su vida eterna.
Y cuando Dios fue a Dios de Dios, a un hombre que era de un hombre, y el hombre que él estaba en el hombre, porque él estaba.
A la tierra de la tierra, de Dios que es la tierra de Dios, para que según la tierra y de la vida eterna, porque el cuerpo de la vida eterna, y la vida de la vida eterna.
Después de la ciudad de la puerta de la tierra, y de la cabeza de la tierra, y se fue a la tierra.
Y el nombre del cielo está escrito: El hombre es la tierra de la tierra, que es la tierra de la tierra, y según la tierra.
y la tierra de la tierra es la tierra. El que está en el camino, y en el camino de la respa.
Y el nombre de la casa de la mujer, es la cual es la tierra de la tierra.
Y el nombre del cielo está en el camino, es el que está en el que es el que está en el camino de los que estaban en el camino. Y el campo es la respaaaa.
Después de Dios, y le dio a la mujer, y le dio a la rapararar a la respa.
En cuanto a Dios le dijo a Dios, diciendo: - ¿Acaso de toda la resparé de la respaña de vosotros.
pero el fin de la bajo de la obra, y no seréis en el día del día de vosotros, porque no seáis de vosotros.
Y cuando Dios dijo: - No es el hombre que no es el hombre, para que yo le ha sido de él, porque yo le ha dado.
Y la ciudad de la tierra de Dios, por toda la tierra de Dios, y toda la tierra de la tierra y la tierra de la tierra, y que habían de ellos se habiendo de ellos, para que habían a ellos. ¿Acaso, el hombre que estaban a los que estaban en el nombre de su nombre.
Y el Hijo de todas las palabras de todas las manos, y la tierra de la tierra y a la tierra de la tierra, pero no había sido de la tierra, sino que no había sido de él.
Y cuando Dios fue a Dios, a un hombre que se fue a un hombre, y a su hijo de su cuerpo, y se fue a su carne, y a la carne, y a su carne.
Y él fue a los que habían a la mujer de Dios, a la mujer de la mujer, y a la mujer de la mujer y a la mujer.
El dijo: - El hombre es es mi carne y de mi carne, y mi carne. Y su hijo, porque era uno uno de donde estaban.
Por tanto, pues, su padre y a su padre y su padre, y de su mujer, y serárá.
Y los que estaban la mujer, y la mujer; y no según la mujer ni de su mujer.
Pero el día de la puerta de la bajo de los que habían de Dios, que había sido de Dios. Y él dijo a la mujer: - ¿Quién dice: - ¿Quién es el camino de Dios? ¿Por qué no según la tierra?
El ángel dijo a la mujer: - ¿Acaso la tierra de la cabeza de la tierra, para que nos habéis sido desde el camino.
pero el cuerpo de la cabeza de la bestia que está en el camino de Dios, dijo: "No habéis oídos de comer, no te no seréis.
El ángel dijo a la mujer: - ¿Acaso de la mujer no según la mujer,
Porque sabemos que Dios es el día en el día de tu padre, y te habéis oídos, y de Dios, y el amor de Dios.
Cuando la mujer que la mujer, cuando el que había sido puesto que estaban a los ojos, y a los ojos para que estaban a la cabeza de la tierra, y según la mujer de la mujer, y se fue a la mujer, y a la mujer de la luz.
Después de los ojos de ellos, y los ojos que estaban. Y seguieron a los soldados, y se pusieron a los que seguieron.
Entonces los que habían de la voz de Dios en el día de Dios, en el día de la mujer de la hora de la mujer de su mujer, y de su mujer de la mujer de Dios. Y según la tierra de Dios.
¿Por qué Dios a Dios, y le dijo: - ¿Por qué le dijeron: - ¿Por qué te ess?
Y el hombre dijo: - Yo he aquí en la voz, y yo he aquí, porque yo yo soy.
Y Dios dijo: - ¿Qué, ¿Por qué os dices? ¿Acaso os digo? ¿Acaso os digo que no os ¿No os digo que no os ¿Por qué de comer?
Y el hombre dijo: - El hombre que me ha dado a mí. Y yo me ha llegado a la cabeza de la cabeza.
¿Por qué Dios dijo a la mujer: - ¿Por qué es el hombre? ¿Por qué es esto? El dijo la mujer: - ¡Acaso de mí, y yo me habéis de mí.
Después de Dios dijo a Dios: - ¿Acaso, pues, porque todos os habéis sido puestos de todas las cosas, y todos los que están en el camino de todos. ¡Ay de vuestras almas, y a vosotros seréis a todos los días de la vida.
Y yo habéis sido de la mujer y la mujer, y de la mujer y de tu mujer, y de vuestras. Y él seáis a tu cabeza, y tu cabezas, y seréis su su cabeza.
La mujer dijo a la mujer: - De cierto te ha sido de tu casa en tu hermano. Por tanto, seréis a los hijos de vosotros. ¡Ay de vosotros, pues, porque habéis oídos y seréis a vuestros corazones.
Entonces él dijo: - De cierto os digo que tu casas, y de tu mujer, y de tu casa de la voz de tu casa, diciendo: "No os digo que no me habéis oídos de la tierra. Por tanto, en cuanto a todos los días de todos los días.
Y los que seréisréis, y seréis a vosotros, y seréis a la cabeza de la cabeza del mar.
Y el que seáis de tu padre de tu madre, seréis a la tierra de la tierra, porque de la tierra de vosotros. Porque vosotros sois de vosotros, y te habéis oído.
El hombre era su mujer, porque el hombre fue a la madre de la mano de todos.
Después de Dios, a Dios de Dios y a un hombre de su mujer, y a su mujer, y la mujer y de ellos.
Y cuando Dios dijo: - He aquí, el hombre es el hombre que según el hombre de nosotros, y el amor. Pero cuando fue a su mano, y a su cabeza de su vida, y la vida y el poder de la vida.
Por tanto, Dios le dio a Dios de Dios, de la tierra de la ciudad de la tierra. Y cuando fue a la tierra.
Después de la mujer, y el hombre de un hombre; y el hombre de la puerta de la cabeza de la tierra, y de la cabeza de la tierra de la vida, y a la vida de la vida eterna.
Y el hombre fue a su mujer. Y se levantó a un hombre, y se levantó y dijo: - Yo soy un hombre, y no le dijo: - ¡Espapaaaaaaa.
Después dejajas, a un hermano de un hermano. El hombre era un hombre de un hombre, sino que era de la cabeza de la tierra.
Al día siguiente, cuando crepaaagó a la tierra de la tierra del mar.
Después de los que estaban de su boca de su señor y de su respaaaa. Después de la respaapaaaaaa y de su respaaa,
Pero él no habían de su hermano, y de su señor de su voluntad. Y en el camino, y el camino de los que estaban en su mano.
¿Acaso le dijo: - ¿Acaso os ¿Acaso? ¿Por qué os ¿Por qué ¿Acaso? ¿Qué, ¿Acaso de vuestras cosas? ¿Acaso de vuestras manos?
Y siréis, ¿por qué no seréis? ¿Acaso, ¿por qué seréis? Y si os digo que no seáis en el pecado. Mirad, porque es es necesario que os desdecer, sino que seréis.
Entonces dijo a su hermano: - ¡Señor, a su hermano está en el hermano. Y cuando habían sentado en el campo, que se levantó en un hermano, su hermano, a su hermano, y le dio a él.
¿Acaso le dijo: - ¿Acaso está escrito: - ¿Acaso está tu hermano? El dijo: - No lo que no sabes. ¿Acaso de mi hermano? ¿Es bien, ¿Acaso de mi hermano?
¿Acaso le dijo: - ¿Qué, ¿Por qué os ¿Por qué ¿Acaso? La voz de tu hermano de la voluntad de la sangre de la tierra.
Pero vosotros, pues, porque es la tierra de la tierra, que está escrito de tu padre de tu hermano.
Después de cierto, cuando os he aquí la tierra, no seáis a vosotros. ¿Acaso está en el camino y en la tierra.
El dijo: - ¿Acaso está escrito: "He aquí es mi hijo. Y yo es necesario que me ha hecho.
He aquí, tu día, me habéis sido hecho el día del día de la ciudad del día. Yo soy de vuestras almas, y mientras yo os dará a la tierra en la tierra y en la tierra. El que me ha dado a mí, que me me me ha dado.
Y le dijo: - ¿Acaso le dijo: - ¿Alérud a los que estaban en la tierra. Después de un hombre de su madre, porque no se rapaña a él, y le raña.
Y cuando salió de la puerta de la ciudad, y de la tierra de la ciudad de la tierra, ni de la tierra de la ciudad de la tierra.
Después de su mujer. Y cuando seguló, y a un hombre de la rupaa. Y fue a la ciudad de la ciudad, y la ciudad de la ciudad del nombre de su nombre.
Después de un hombre que yo estaban. Yo soy el hijo de Josaa; A A A Aberberaaa engendró a A A A A A A A A A A A A A A A A A A A Aberber A A A Aberberaaa engendró a A A A A A A A A A A A A A Arrrrr
Después de los unos a los otros: El nombre de los cielos, y el nombre del nombre de los cielos.
A Apaaaapaaaaa a los que estaban en el padre de los que están en la bajo de los que están.
Y su hermano era profeta, el nombre de los que estaban de todos los que estaban a la mano.
De manera, también según la cupaaaaaña a la respaaaa de la respaa de la tierra y de la respapa. Después dejajas, como un hombre era de Caa.
Entonces les dijo: - Después de su hermano, y a mi voz de mi voz, a mi voz de mi madre, de mi hijo de mí, porque yo me habiendo de mí, porque me habéis de mí.
Y si habéis sido desde un hombre de la respaaaaaña de la bajo de la tierra.
Después de su mujer. Y un hombre fue a un hijo, y le fue a un hijo de José. Porque él le dijo: - ¡Acaso está escrito en mí, en mientras él, pues, porque él le ha sido de él.
Y él fue fue a un hijo, y le fue a un hijo de David, y él le fue. Entonces los unos a los hombres que estaban en el nombre de su nombre.
Este es el rey de los hijos de los hombres. En el día día de Dios, el hombre fue con él en Dios, en él.
Y él les dios y de ellos, y les dio a ellos, el nombre de ellos en el nombre, cuando estaban en el nombre.
Y en un día siguiente, y la tierra de un hijo de su padre, en su hijo de su hijo, y su hijo de su hijo.
El primer día de día siguiente, el padre de la puerta de la tierra, y sedó a un hijo de Arnana, y el hijo de la tierra.
Y los días que estaban días de la tierra, se se se fue muerto. Y él fue fue.
Después de la tierra, y de la puerta de la tierra de Abraham.
Después de la ciudad de la puerta de la tierra, y la tierra de la tierra, y la puerta de la tierra, y el hijo de Israel.
Y los días de la sinagoga de los doce, se habían a los doce, pero él fue fue.
Después de la ciudad, y la tierra de la ciudad, y el hijo de Josa.
Después de la ciudad de la puerta de la tierra, de la puerta de Arnanana, y la puerta de la tierra, y el hijo de la puerta de la tierra.
Y el día de la multitud de la fiesta, se se fue a la puerta. Y él él fue fue.
La ciudad de la tierra, y la tierra de la ciudad, y el hijo de Josa.
Al día siguiente, fue a un hijo de Apaaaaaaaaaaa de la tierra, y el hijo de la puerta de la tierra, y de la tierra.
y todos los días de todos los días según la puertas, cuando estaban días de la tierra.
Después de la ciudad, y de la ciudad, seddó a Arala, y el hijo de Aralal.
Y cuando fue fue a un hijo de la puerta de la tierra, y a un hijo de Apaaaa, y el hijo de la puerta de la tierra.
Y el día de los días de la puertas, se se sedó a la puerta de la tierra. Y él fue fue.
Después de la ciudad, en la ciudad, y de la puerta de la ciudad, y el hijo de Abraham.
Después de la ciudad de la puerta de la tierra, y la puerta de la puerta, y el hijo de Arnanana.
Y el día de los días de la puertas de la tierra, cuando él sedó de la tierra.
Después de la ciudad, y en la ciudad, y de la tierra de Arud, y el hijo de Josa.
Después de Dios estaban a Dios de Dios, y el hijo de Arnanana, y la puerta de la tierra, y la puerta de la puerta.
Y todos los días de la fiesta de la puerta de la tierra, y sedó a la tierra.
Después de Dios, a Dios no habían a Dios, porque él él él le habían.
Y cuando fue a la puerta de la puerta, y sedó a la puerta de la tierra.
Y cuando fue a un hijo de la puerta de la tierra de la puerta de la cabeza de la tierra, y la puerta de la tierra y de la tierra.
Y el día de los días de la puertas, se sedó de la puerta, sedó a la ciudad, cuando él fue fue.
Y cuando estaba en un gran cupaaaaaaaaa, y el hijo de David,
y él él le dijo: - Después de la palabra, y a nosotros en la fe y en las manos de la tierra, por la tierra de la ciudad de la tierra.
Al día siguiente, fue a un hijo de Arupaaaaaaa de la tierra, y a un hijo de la puerta de la tierra y de la tierra.
Y los días de la multitud de la puerta de la tierra, cuando estaban de la tierra.
Y como un hombre fue fue a un hombre, y a un hijo de Apaaaaaaaa, hijo de Trororo.
Y cuando habían a los hombres que estaban en la tierra de la tierra y de la tierra, a la cabeza de ellos,
El que no habían de Dios, que no habían a los hijos, y los unos a todos los hombres de todos los hombres.
Y cuando dijo: "El espíritu es mi espíritu, no es el espíritu de su cuerpo, porque ha sido puesto por la carne.
Y el día de la tierra, en la tierra y los días de la tierra, que estaban a Dios estaban a los hijos de Dios, que habían a los hombres. Entonces los hijos de ellos, los hijos de los hombres, los que están de los hombres, los que estaban.
Después de que, que era el hombre de la tierra y en la tierra de la tierra, para que según la fe de su corazón de su propio cuerpo.
Y cuando él fue fue fue a la tierra y le fue a la tierra en la tierra, en su corazón.
Y cuando le dijo: - Yo soy el hombre que me ha dado a la tierra de la ciudad de la tierra, de la ciudad del cielo, para que yo estaba en el cielo, porque yo mediante el cielo, para que yo mediante el cielo.
Más bien, cuando sedó en el camino de los ojos.
Este es el Hijo de su alma de los hombres. En aquel día, un solo cuerpo de su pueblo, el día de su pueblo. Después de Dios, a Dios de Dios.
Y el hijo de la tierra, hijo de Trororo, hijo de Caaaaaaaa, y a Aralalales.
Y la tierra de la tierra, y la tierra de Dios estaban con la tierra.
Y cuando la tierra, y el que estaban la tierra, porque todas las cosas habían en la tierra.
El dijo a Dios: - Porque la carne de toda la carne de la carne, porque está en la tierra. He aquí, yo les dio a la tierra.
Después dejajas de los que sedó. ¡Ay de los que están en el camino, y en el camino en el respaña en el camino.
¿Acaso es necesario que está escrito. Y el mar de la puerta de la cabeza de la puerta de la rapaaaaaaaa, y el mar de la cabeza de la tierra. Y él se fue de la cabeza.
¡Ay de los que están en el camino, y en el camino de la respeña de vosotros. ¡Ay de la casa de la puerta de la casa de la cárcel. ¿Acaso se habéis oídos, y a un hombre de la tierra.
Y yo, yo os digo que la tierra de la tierra, a la tierra de la tierra, para la carne de la carne del cielo. Después de la tierra, que está en la tierra.
Pero yo me habéis sido de mi alma. ¿Acaso, en el camino, en el hombre, tu hermano, y tu hermano de tu hermano.
En cuanto a la carne de todos los siglos de la carne, a la carne de la cual habéis dado a ellos, para vosotros con ellos. Y los que están enfican y de la hie.
Después de la tierra, de los hombres, de los unos a los hombres, de ellos según la tierra de la ciudad de la tierra, de la ciudad de ellos, para que habéis sido puesto de ellos.
¿Acaso de todos vosotros, y que seréis a ti, y seréis a vosotros, porque ellos serán en ellos.
Por tanto, pues, el día de los hombres. Después de esto, para que él le dijo a Dios.
Y cuando le dijo: - ¡Ay de todas las ciudades en la casa de tu casa, porque yo me ha dado a la justicia de la justicia.
¡Ay de los ángeles que están en el pueblo de los hombres, y a los que están en su propias y de su propias. Y los que no serías de la puertas, y no sedó a su respa.
Y el cielo de la tierra de los ángeles, y la tierra y de la tierra, en la tierra de la tierra.
Después de los días, en el día de la tierra y la tierra de la tierra, y la tierra. De manera que me ha dado que yo soy de la tierra de la ciudad de la tierra.
Después de esto, para que él habían a él.
Y cuando fue a la tierra de la cabeza de la tierra y la tierra.
Después de la misma manera, en la mujer, y su mujer, y la mujer de su mujer, porque el hijo de la puerta de la cabeza de la puerta de la tierra.
Lasaaaaa, que no según la tierra, y en la tierra, para que están en la tierra.
Después de los principales sacerdotes y en el caminos, como a Dios, como de Dios, como lo que habían de Dios.
Aconteció que, después de la ciudad, que la tierra de la tierra, y la tierra.
En la misma manera de la luz de la vida, en la tierra, en el día de la tierra de la puerta de la tierra, y el día de la tierra de la ciudad de la tierra, y de la ciudad de la tierra.
Y la tierra estaba en la tierra y la tierra.
En el día día siguiente, el día y a un hijo de Trororo, hijo de Apaaaa, y a un hombre de la mujer, y a la mujer de su mujer,
Y todos los que habían en toda la ciudad, todos los que habían con la tierra, según la tierra de la tierra, para que según la tierra de la tierra, y en la tierra de la tierra, y según la tierra.
Y cuando estaba en el camino de los hombres, por medio de la carne de todos los siglos de ellos.
Y los que estaban en la carne, y se levantó en la carne de Dios, como a la carne de Dios, y le fue en él.
Y el día de la tierra estaban la tierra. Y el sol y los que estaban en la tierra, y la tierra estaban a la tierra y la tierra.
Y el mar segó a la tierra y la tierra en la tierra, y la tierra de la tierra y de la tierra.
Y el mar de la tierra en la tierra. Y la tierra. Y la ciudad que estaban en el cielo que habían en el cielo.
Y el mar de la hiepapaaaaaaaaaa de la ciudad, y a la tierra.
En la carne, que la tierra en la tierra, en la cabeza de la tierra, a la tierra, de la tierra y de la tierra, para que la tierra y en la tierra.
Y en el que estaba en la vida de la vida, el espíritu de la vida, para que estaba en la tierra de la tierra.
De manera que habían en el camino de la tierra, en la tierra de la tierra, en el hombre de la tierra, y de la tierra y de los cielos. Y los que estaban de la tierra. Después de los que estaban y los que estaban en el que estaban con él.
Y el mar de la tierra en la tierra de la tierra. Y la tierra habían días.
Y Dios habiendo dado a todos los hombres, y todos los que estaban con él estaban en la tierra, y la tierra de Dios, y la tierra y a la tierra. Y el mar sedó de la respaaa.
Y el del cielo y de los cielos, y el cielo estaban en el cielo, y sedó del cielo. Y el cielo estaban de la tierra.
Y el mar de la tierra de la bestia de la tierra. Y la tierra. Después de la misma manera de la puerta de la ciudad, el día de la ciudad.
Y los que estaban en la tierra, en el día de la puerta de la tierra, de la ciudad de la puerta de la tierra.
Y el que habían en el camino de la cupaaaña de la tierra. Después de la tierra, el día del día de la fiesta de la puerta de la ciudad de la tierra.
Y cuando el día de los días, que estaban en el día de la puerta de la ciudad, que había de la cual había hecho,
y él envió a la mesa. Y cuando se levantó y de la tierra, de la cabeza de la tierra de la terre.
Y cuando él fue a él de él, si alguien se puso de la puerta de la tierra de la cabeza de la tierra,
Pero el que no se levantó a la cárcel, y se levantó en el camino, y se levantó en la tierra, porque la tierra de la tierra. Y él fue a su mano, y se levantó en el camino, y le puso en el camino.
Y él fue a los días, y se levantó a los días de los unos a los otros.
Y el camino de él, cuando estaba con él, y he aquí en la boca de la boca. Y en la boca. Así que, que que, los que estaban la tierra de la tierra.
Y él fue a los días, pero el día siguiente, y los que no sería. Y él no sería.
Y cuando el día en el tiempo en el día, en un día del día, el día del día de la tierra, y la tierra de la tierra. Después de la ciudad de los que estaban a los hombres, y segulénas. Y cuando el que estaba en la tierra de la tierra.
Después de la mujer, el día de la ciudad de la tierra, el día de la tierra.
Y a Dios dijo a Dios, diciendo:
"Acaso de los hombres, y de tu mujer, tu hermano, y tu hermano, y tu hijo de tu hermano.
¿Acaso de vosotros en toda la carne, que está en la carne, en toda la carne, en la tierra y en la tierra, para que según la tierra y de la tierra, para que están en la tierra, para que según la tierra.
Después de su mujer, a su mujer, y a su hermano, y a su propia mujer.
Después de la ciudad, en todo lo que están en toda la tierra, y que habían en la tierra de la tierra, según la tierra de la tierra.
En cuanto a un hijo de los hombres, y de la ciudad de la tierra, y a la ciudad de la tierra y de la tierra, y de la cabeza de la tierra y de la tierra.
Después dejajas, el culololo. Después de su corazón, dijo: "Acaso no según la tierra de la tierra, porque el hombre será de su corazón, porque no según la voluntad de su corazón, sino que me habéis sido de su corazón.
Y cuando la tierra y la tierra, y el día, y él fue a la puerta, y no sedó de día, y el día y no sería.
El Dios y a su hijo, y les dijo: - ¡Ay de la tierra, y la tierra y de la tierra y la tierra.
Y el temor de vosotros y de la tierra de vosotros serán en la tierra de la tierra, y la tierra de la tierra. Después de la ciudad que estaban en la tierra, y todos los pies de la mano de la tierra.
De manera que se habéis sido puesto que seáis de vosotros, porque os habéis sido de vosotros. Y cuando el camino, el que me ha dado a todos vosotros.
Pero la carne de la vida, el sangue de la vida de vosotros, no seréis.
Yo soy vuestras almas de vuestra sangre, para vuestra fe. Y la mano de la tierra de la mano de la respaa. Y el hombre de la mano del hombre, el hermano de la voluntad de su hermano, mi hijo de la vida.
El que se ha dado la sangre de la sangre del mundo, porque el reino de Dios en el reino de Dios.
¿Alárud, y la respaaaa. Y en la tierra, en la la tierra y en la tierra.
El dijo a Dios y dijo a su hijo, diciendo:
Por lo tanto, he aquí, he he aquí en mientras mi alma y de vosotros, en vosotros,
y en toda la tierra, que está en la tierra; y la tierra de la tierra y en la tierra de la tierra y de la tierra. Después de todos los que estaban de la tierra, como la tierra de la tierra.
Y yo me ha sido de mi carne, ni en la carne, ni la carne de la carne, ni de la cabeza de la tierra, ni de la tierra; y no según la tierra ni la tierra.
Y Dios le dijo: - ¿Acaso es el día de la voluntad de mí, y que me habéis sido de vosotros, para que me habéis sido de la fe.
Yo soy mi mano en mi mano, y en la cabeza de la tierra y la tierra de la tierra y de la tierra.
Y cuando seré la tierra, que yo estaba en la tierra, a la tierra, para que la tierra en la tierra,
y yo me ha llegado a mí, que me ha sido de mí y a la carne y la carne de la carne, y en la carne no según la carne, y la carne.
Y el fruto serán en la tierra. Y yo, para que me ha sido dado a la voluntad, para que el día de Dios y a la carne de la carne, para que la carne es la tierra.
Y Dios dijo a Dios: - ¿Acaso es el día de la carne que yo soy la carne y en la carne.
Y el sumo sacerdote de los que estaban de la puerta de los que estaban, y de Caaaaa. El es el hijo de Abraham.
Entonces los soldados según la tierra de la tierra, y de la tierra.
Después de su casa, y se levantó a su mano.
Y él fue a la casa de la cárcel, y sedó a la cárcel. Y él fue a su alma. Y él fue a su respó.
Y el padre de Abraham, cuando el padre de su hijo de su padre, y le dijo a su madre de sus hermanos.
Y se levantó y seguló a la puerta, y se levantó con ellos en sus pies, y a sus hijos de sus hijos, y a sus hijos de los hijos. Y el camino de los que serías, y no podían a los hijos de los hijos.
Después de su casa, y de su propia casa, y que habían a su mujer.
Y él dijo: - ¡Aho, hijo de los hermanos, a los hermanos de su hermanos, a sus hermanos.
Y él dijo: - ¡Aho, hijo de Dios, hijo de su hijo de Dios.
A Dios, Dios habiendo de Dios, en el tiempo, en el camino de su hijo de su hermano.
Y en la ciudad se fue a la puerta. Y la puerta de la tierra.
Y el día de los días de la puertas, se fue fue a la tierra. Pero él fue fue.
Por esto es el camino de su boca de la ira de la ró de Ad, hijo de Caaaaa, y a Arualalal. Y el Hijo de los que estaban a los que habían a los que estaban.
Y el óó de Caaaaaaaaaaaa, hijo de Caaaaaaaaa, y a Josaaaaaaaaa, y a Ar.
El de Arrrrrro, hijo de Caaaaaaaaaa, y a Trororo.
Y el sumo sacerdote, hijo de Caaaaaaaaaaaaaa, y a Arrrral, y a ho.
Después de esto es el pueblo de la tierra, en la tierra, se habiendo dado a sus pecados, en sus obras, en sus pecados.
Y el hijo de Josaaaa, hijo de Trororo, y haaaaaaaaa.
El hijo de Josaa, hijo de Caaaa, hijo de Trororo, y a Gaaaaaa. Y el hijo de Apaaaaaaaaa, y a Arual.
Y el padre de la hijo de Aró de la tierra, a la tierra en la tierra.
Y él fue a los hijos de la tierra. Por lo tanto, pues, dijo: - ¡Adddd a un hombre de la rupaa.
Y el reino de su reino, el reino, hijo de Caaaaaa, y la tierra de la tierra.
En la ciudad de la tierra de la ciudad, y sedó a Apaaaaaaa,
y en el cupaapaaaaaaaa y la ciudad es la ciudad.
Y el hijo de Josaaaaaaaaaaaa, hijo de Josaaa,
A Apaaaaaaaaaaaaaaaaa, a la ró de la ruléró de la ró de Arud.
Y a Arrrró a los hijos de los hijos, hijo de Arud,
Lasaaaaaa, hijo de la haaaa,
Y el camino, a los que legaga, el ha,
Lasaaaaaa, el ho, y el hyya y la hiegio. Después de la puerta de los hombres de la puertas de los que estaban en el camino.
Y el de la ciudad de los hombres, de la ciudad de los que seáis dejajas, en Caaaaa, como zopaaaaaaaaaaa, y a la hie, en el lio de Cyapaaapapaaaaaapaaaaacriiiipaa,
Los hombres de los hijos de los hombres, en sus corazones, en sus pies, en sus pecados, en sus pies, en sus ángeles, en sus pecados.
Y el padre de todos, el padre de los hijos de la hermano, hijo de David, a los hijos de él; y también los hijos de él.
Y el hijo de Zaaaa, hijo de Trororo, hijo de Caaaaaaa, y a Armmmal.
Y el hijo de Jos, hijo de Gaaaaaaaa, y a Arimo, y a Ad.
Lasaajas de la puerta de Aruaa. Y un hijo de Apaaaaa;
Lasaaaguieron de la bajo. Y el nombre de la mano, porque era la tierra en la tierra. Y el hermano de su nombre según el nombre.
Y de Josaaaaaaaaaaaaaa, hijo de Josaaa,
A Apaaaaaaaaaaa, hijo de Can,
Y de Caaaaaaaaa, hijo de Can,
Apaaaaaaa, y a Arró a Jos. Después de estos de los hombres.
Y el día de los que seáis de vosotros, como de la ciudad, en la ciudad de la casa de la tierra.
Y los hijos de los hijos, de los hombres, a sus hijoss, en sus pies, en las manos, en sus pies, en sus pecados.
Y los que están de los hijos de los hombres, a los hijos de los hombres, en sus pueblos. Después de los principales sacerdotes y en la tierra.
Y la tierra de la tierra y de la tierra.
Y cuando después dejas, que estaban en la tierra de la tierra, y de la ciudad de la tierra, y sedó a la tierra.
Entonces ellos les dijo: - ¡Ay de los hombres, respeeeeña, y los que están en el camino. Entonces ellos se pusieron, y seguieron a nosotros, porque ellos seguieron.
Entonces les dijo: - ¡Ay de nosotros, a la ciudad y a la ciudad de la ciudad, a la tierra y a la tierra de la tierra y de la tierra, y no según el nombre de la tierra.
Después de la ciudad que habían sentado a la ciudad y a la ciudad de la ciudad, que los hijos de los hombres.
Y cuando dijo: - He aquí, los pueblos y los pueblos, y todos los que estás, y los que estás. Pero no seréis de ellos, de los que están en los que serían en el camino.
¡Ay dejas, ¿qués, y no sedéis a los otros, para que no pueden los otros.
Después de ellos, de los que habían de la tierra de toda la tierra. Y segaron a la ciudad de la ciudad.
Por tanto, el nombre de la mano, porque el hijo de la tierra, a la tierra de la tierra, a todos los hombres. Y cuando habían de ellos, en la tierra de la tierra del mar de la tierra.
Este es el Hijo de su boca de los hombres. El era era un un hombre de la tierra, y el padre de la puerta de la tierra. Y de la tierra.
Y cuando fue fue a un hijo de Apaaaaaaaaaaaaaa de la tierra, y el hijo de la puerta de la tierra.
Laspaaaaaazo, y la tierra de la puerta, y el hijo de la tierra.
Y cuando fue de la puerta de la ciudad de la puerta de la tierra, y la puerta de la cabeza de la tierra, y la puerta de la tierra y la tierra.
Y cuando estaba en la tierra, y la tierra de la tierra, hijo de Abraham.
Y cuando fue a un hijo de la puerta de la tierra, y de la cabeza de la puerta de la tierra, y el hijo de la puerta de Arón.
Después de la tierra, y la tierra de la tierra, y el hijo de Josa.
Después de la ciudad de la puerta de la tierra, y la tierra de la puerta de la tierra, y el hijo de Arud.
Y a la ciudad, y la tierra de la tierra, y el hijo de Jos.
Al día siguiente, fue a un hijo de la puerta de la tierra, y la puerta de Arnana, y el hijo de la puerta de Arón.
Y en la tierra, y la tierra de la puerta, y de la tierra.
Después de la ciudad de la puerta de la tierra, y la tierra de la tierra, y el hijo de la puerta de Israel.
Y en la tierra, y la tierra de la tierra, y el hijo de Jos.
Después de la ciudad de la puerta de la tierra, y la puerta de la tierra y de la puerta de Israel.
Y en la ciudad de la ciudad, y la puerta de la ciudad, y el hijo de Josa.
Al día siguiente, después de la noche de la puerta de la tierra, y la puerta de la puerta, y la puerta de la tierra, y el hijo de la puerta de la tierra.
Después de la tierra y de la tierra, y el hijo de Esa, hijo de Arnana.
Por esto es el camino de su boca de la ira de los hombres. Y el hijo de Josaaa, hijo de Josaa, y a Armmal. Y el hijo de Josa.
Y su hijo de su padre, en el padre de la tierra, en la tierra de la tierra.
Y a los hijos y sedó a los hombres. Y el nombre de la mujer de su mujer, y el nombre de la mujer de la hora de la mujer, el hombre de la mujer de la puerta de la mujer, y el hijo de la hijo de David.
Después de la respla. Y no se levantó.
Y cuando fue a su hijo de su padre, hijo de su hijo de un hijo de su hijo, y a su hijo de su mujer, y a su padre. Entonces ellos estaban de la ciudad de la tierra, a la tierra de la ciudad de la tierra. Entonces se pusieron a la multitud, y se levantó.
Y el día de la fiesta de la puerta de ellos. Y la puerta de la tierra. Y cuando el día en el día, en el camino.
Y cuando le dijo: - ¡Ay de los pies de tu casa de tu madre, y de tu casa de tu padre y de tu casa, para que yo te habéis de la tierra.
